"""block_amax: the reference against the loop oracle; the Pallas kernel's SIMT program on the CPU
emulator (which cannot prove the kernel, so it also lowers for CUDA here), and on the GPU
(device machine), against the reference, exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import scores as make_scores

import dsv41_jax as dj
from dsv41_jax import _simt
from dsv41_jax.blocks import mgpu_amax, pallas_mgpu, reference


def amax_expected(s, lens, b, pin=True, starts=None):
    nb = -(-s.shape[1] // b)
    rows = []
    for r in range(s.shape[0]):
        st = 0 if starts is None else int(starts[r])
        rows.append(oracle.block_amax_row(s[r, st:], int(lens[r]), b, nb, pin))
    return np.array(rows, np.float32)


@pytest.mark.parametrize("kind", ["random", "ties", "special", "denormal"])
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


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("pin", [True, False])
def test_block_amax_of_denormal_scores(dtype, pin):
    """Blocks whose maxima are denormals, by IEEE value (XLA's CPU backend flushes denormals to
    zero in a float max): each block's max is its largest score, exactly."""
    # Denormals exact in float32 and bfloat16 (bit patterns m << 16).
    bits = np.array([1, 2, 3, 5, 0x7F], np.uint32) << 16
    d1, d2, d3, d5, dmax = bits.view(np.float32)
    blocks = [
        [d1, d3, -0.0, -d1],
        [-d3, -d1, np.nan, -np.inf],
        [0.0, -d2, -0.0, -1.0],
        [d5, dmax, d2, 0.0],
        [-d5, -d2, 9.0, 9.0],
    ]
    s = np.array(blocks, np.float32).reshape(1, -1)
    lens = np.array([18], np.int32)  # the last block holds two positions; the 9.0s are unseen
    want = [d3, -d1, 0.0, dmax, np.inf if pin else -d2]
    got = dj.block_amax(
        jnp.asarray(s.astype(dtype)), jnp.asarray(lens), block_size=4, pin_newest=pin
    )
    np.testing.assert_array_equal(np.asarray(got)[0], want)
    np.testing.assert_array_equal(want, amax_expected(s, lens, 4, pin)[0])


def test_block_amax_with_starts(rng):
    s = make_scores(rng, 5, 100, "random")
    starts = np.array([0, 3, 50, 99, 100], np.int32)
    lens = np.array([100, 40, 50, 1, 0], np.int32)
    got = dj.block_amax(jnp.asarray(s), jnp.asarray(lens), starts=jnp.asarray(starts))
    np.testing.assert_array_equal(np.asarray(got), amax_expected(s, lens, 8, starts=starts))


@pytest.mark.parametrize("kind", ["random", "special", "denormal"])
@pytest.mark.parametrize("rows,n,b", [(2, 2048, 8), (3, 2563, 8), (1, 1536, 16), (4, 203, 3)])
def test_block_amax_program_on_the_emulator(rng, kind, rows, n, b):
    """The Pallas kernel's SIMT program on the CPU emulator (bounds, initialisation and race
    checks; every output written once): 16-byte and scalar loads, partial last blocks."""
    s = make_scores(rng, rows, n, kind)
    lens = rng.integers(0, n + 1, rows).astype(np.int32)
    lens[0] = n
    for pin in (True, False):
        got = pallas_mgpu.block_amax(s, lens, b, None, pin, emulate=True)
        want = reference.block_amax(jnp.asarray(s), jnp.asarray(lens), b, None, pin)
        np.testing.assert_array_equal(got, np.asarray(want))


MUTANTS = {
    "max starts at 0": ("NEG_INF", 0),
    "newest pinned to -inf": ("POS_INF", 0xFF800000),
    "NaN propagates": (
        "fmax",
        lambda self, a, b: np.maximum(a.view(np.float32), b.view(np.float32)).view(np.uint32),
    ),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_block_amax_program_mutants_are_caught(monkeypatch, rng, mutant):
    """The emulator test can fail: each mutant of the program (or of the instruction it relies
    on) gives another answer on rows with NaNs, -inf and short lengths."""
    name, value = MUTANTS[mutant]
    target = _simt.Emulator if name == "fmax" else mgpu_amax
    monkeypatch.setattr(target, name, value)
    s = make_scores(rng, 3, 2048, "special")
    lens = np.array([2048, 1001, 17], np.int32)
    got = pallas_mgpu.block_amax(s, lens, 8, None, True, emulate=True)
    want = reference.block_amax(jnp.asarray(s), jnp.asarray(lens), 8, None, True)
    assert not np.array_equal(got, np.asarray(want))


def test_block_amax_lowers_for_cuda():
    """The SIMT program becomes a Mosaic GPU kernel at V4.1 shapes (the MLIR verifies; only the
    device compiles it further)."""
    spec = mgpu_amax.AmaxSpec(1 << 20, 8, True)
    f = jax.jit(lambda s, n: mgpu_amax.launch(spec, s, n))
    args = (
        jax.ShapeDtypeStruct((64, 1 << 20), jnp.float32),
        jax.ShapeDtypeStruct((64,), jnp.int32),
    )
    text = f.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "custom_call @mosaic_gpu" in text


@pytest.mark.parametrize("pin", [True, False])
def test_block_amax_program_takes_ragged_rows(rng, pin):
    """Rows with starts (was: declined, so a GPU without the extension ran the reference): block
    b of row r is the max of its positions [b·B, (b+1)·B) after starts[r], as the reference
    shifts them, rows starting at 0, mid-row and at the end included."""
    s = make_scores(rng, 6, 2563, "special")
    starts = np.array([0, 3, 1000, 2562, 2563, 17], np.int32)
    lens = np.array([2563, 2000, 1563, 1, 0, 9], np.int32)
    got = pallas_mgpu.block_amax(s, lens, 8, jnp.asarray(starts), pin, emulate=True)
    want = reference.block_amax(jnp.asarray(s), jnp.asarray(lens), 8, jnp.asarray(starts), pin)
    np.testing.assert_array_equal(got, np.asarray(want))
    np.testing.assert_array_equal(got, amax_expected(s, lens, 8, pin, starts))


def test_block_amax_pallas_refuses_what_it_cannot_do():
    s, n = jnp.zeros((2, 20)), jnp.zeros((2,), jnp.int32)
    with pytest.raises(NotImplementedError, match="float32"):
        pallas_mgpu.block_amax(s.astype(jnp.bfloat16), n, 8, None, True, emulate=True)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "ties", "special"])
@pytest.mark.parametrize(
    "rows,n",
    [(1, 2048), (8, 131072), (64, 16384), (3, 1 << 20), (5, 2560), (4, 25600), (2, 1003), (6, 203)],
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
