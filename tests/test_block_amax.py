"""block_amax: the reference against the loop oracle; the Pallas kernel in interpret mode on the
CPU (race detection on; interpret mode is not proof, so the kernel also lowers for CUDA here),
and on the GPU (device machine), against the reference, exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import scores as make_scores

import dsv41_jax as dj
from dsv41_jax.blocks import pallas_mgpu, reference


def amax_expected(s, lens, b, pin=True, starts=None):
    nb = -(-s.shape[1] // b)
    rows = []
    for r in range(s.shape[0]):
        st = 0 if starts is None else int(starts[r])
        rows.append(oracle.block_amax_row(s[r, st:], int(lens[r]), b, nb, pin))
    return np.array(rows, np.float32)


@pytest.mark.parametrize("kind", ["random", "ties", "special"])
@pytest.mark.parametrize("pin", [True, False])
def test_block_amax(rng, kind, pin):
    b, n = 8, 203
    lens = np.array([0, 1, 7, 8, 9, 16, 17, 200, 203, 64], np.int32)
    s = make_scores(rng, len(lens), n, kind)
    got = dj.block_amax(jnp.asarray(s), jnp.asarray(lens), block_size=b, pin_newest=pin)
    np.testing.assert_array_equal(np.asarray(got), amax_expected(s, lens, b, pin))


def test_block_amax_all_nan_block_scores_minus_inf():
    s = np.full((1, 24), np.nan, np.float32)
    s[0, 3] = -np.inf
    s[0, 9] = 2.0
    got = dj.block_amax(jnp.asarray(s), jnp.array([24], jnp.int32), pin_newest=False)
    np.testing.assert_array_equal(np.asarray(got), [[-np.inf, 2.0, -np.inf]])


def test_block_amax_with_starts(rng):
    s = make_scores(rng, 5, 100, "random")
    starts = np.array([0, 3, 50, 99, 100], np.int32)
    lens = np.array([100, 40, 50, 1, 0], np.int32)
    got = dj.block_amax(jnp.asarray(s), jnp.asarray(lens), starts=jnp.asarray(starts))
    np.testing.assert_array_equal(np.asarray(got), amax_expected(s, lens, 8, starts=starts))


def finished(x):
    """Interpret mode runs the kernel's callbacks on another thread, and they dispatch jax ops:
    starting the next computation (the reference) before they finish can deadlock the CPU client."""
    return jax.block_until_ready(x)


@pytest.mark.parametrize("kind", ["random", "special"])
@pytest.mark.parametrize("rows,n", [(2, 2048), (3, 2560), (1, 1536)])
def test_block_amax_interpret_equals_reference(rng, kind, rows, n):
    s = jnp.asarray(make_scores(rng, rows, n, kind))
    lens = jnp.asarray(rng.integers(0, n + 1, rows).astype(np.int32)).at[0].set(n)
    for pin in (True, False):
        got = finished(pallas_mgpu.block_amax(s, lens, 8, None, pin, interpret=True))
        want = reference.block_amax(s, lens, 8, None, pin)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_block_amax_lowers_for_cuda():
    """The GPU lowering (stricter than interpret mode) accepts the kernel at V4.1 shapes."""
    cfg = pallas_mgpu.BlockAmaxConfig()
    f = jax.jit(lambda s, n: pallas_mgpu._block_amax(s, n, cfg=cfg, pin=True))
    args = (
        jax.ShapeDtypeStruct((64, 1 << 20), jnp.float32),
        jax.ShapeDtypeStruct((64,), jnp.int32),
    )
    text = f.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "mosaic_gpu" in text


def test_block_amax_pallas_refuses_what_it_cannot_do():
    s, n = jnp.zeros((2, 20)), jnp.zeros((2,), jnp.int32)
    with pytest.raises(NotImplementedError, match="multiple of 512"):
        pallas_mgpu.block_amax(s, n, 8, None, True, interpret=True)
    with pytest.raises(NotImplementedError, match="multiple of 512"):
        pallas_mgpu.block_amax(jnp.zeros((2, 4104)), n, 8, None, True, interpret=True)
    with pytest.raises(NotImplementedError, match="starts"):
        pallas_mgpu.block_amax(jnp.zeros((2, 16)), n, 8, n, True, interpret=True)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "ties", "special"])
@pytest.mark.parametrize(
    "rows,n", [(1, 2048), (8, 131072), (64, 16384), (3, 1 << 20), (5, 2560), (4, 25600), (2, 1536)]
)
def test_pallas_block_amax_equals_reference_on_device(rng, kind, rows, n):
    s = make_scores(rng, rows, n, kind)
    lens = rng.integers(0, n + 1, rows).astype(np.int32)
    lens[: min(rows, 6)] = [0, 1, 7, 8, 9, n][: min(rows, 6)]
    for pin in (True, False):
        args = (jnp.asarray(s), jnp.asarray(lens))
        got = dj.block_amax(*args, pin_newest=pin, implementation="pallas")
        want = dj.block_amax(*args, pin_newest=pin, implementation="reference")
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.gpu
def test_pallas_block_amax_ignores_columns_past_length(rng):
    s = make_scores(rng, 4, 4096, "random")
    lens = jnp.array([0, 100, 2049, 4096], jnp.int32)
    poisoned = jnp.where(jnp.arange(4096)[None] < lens[:, None], jnp.asarray(s), jnp.inf)
    got = dj.block_amax(poisoned, lens, implementation="pallas")
    want = dj.block_amax(jnp.asarray(s), lens, implementation="reference")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.gpu
def test_pallas_block_amax_jit_repeatable(rng):
    s, lens = jnp.asarray(make_scores(rng, 8, 16384, "ties")), jnp.full((8,), 9999, jnp.int32)
    f = jax.jit(lambda s, l: dj.block_amax(s, l, implementation="pallas"))
    first = np.asarray(f(s, lens))
    for _ in range(20):
        np.testing.assert_array_equal(np.asarray(f(s, lens)), first)
