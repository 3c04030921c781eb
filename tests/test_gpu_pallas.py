"""Pallas Mosaic GPU kernels on the H200 against the reference, exactly (device machine)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import scores as make_scores

import dsv41_jax as dj

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["random", "ties", "special"])
@pytest.mark.parametrize(
    "rows,n", [(1, 2048), (8, 131072), (64, 16384), (3, 1 << 20), (5, 2560), (4, 25600), (2, 1536)]
)
def test_pallas_block_amax_equals_reference(rng, kind, rows, n):
    s = make_scores(rng, rows, n, kind)
    lens = rng.integers(0, n + 1, rows).astype(np.int32)
    lens[: min(rows, 6)] = [0, 1, 7, 8, 9, n][: min(rows, 6)]
    for pin in (True, False):
        args = (jnp.asarray(s), jnp.asarray(lens))
        got = dj.block_amax(*args, pin_newest=pin, implementation="pallas")
        want = dj.block_amax(*args, pin_newest=pin, implementation="reference")
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_pallas_block_amax_ignores_columns_past_length(rng):
    s = make_scores(rng, 4, 4096, "random")
    lens = jnp.array([0, 100, 2049, 4096], jnp.int32)
    poisoned = jnp.where(jnp.arange(4096)[None] < lens[:, None], jnp.asarray(s), jnp.inf)
    got = dj.block_amax(poisoned, lens, implementation="pallas")
    want = dj.block_amax(jnp.asarray(s), lens, implementation="reference")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_pallas_block_amax_jit_repeatable(rng):
    s, lens = jnp.asarray(make_scores(rng, 8, 16384, "ties")), jnp.full((8,), 9999, jnp.int32)
    f = jax.jit(lambda s, l: dj.block_amax(s, l, implementation="pallas"))
    first = np.asarray(f(s, lens))
    for _ in range(20):
        np.testing.assert_array_equal(np.asarray(f(s, lens)), first)
