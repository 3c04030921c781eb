"""Quantizers and cache writes: DeepGEMM's formulas, its page layout, bit for bit."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import oracle
import pytest

import dsv41_jax as dj
from dsv41_jax import quant


def fp8_oracle(x):
    scale = np.float32(max(float(np.abs(x).max()), 1e-4)) / np.float32(448.0)
    return (x * (np.float32(1.0) / scale)).astype(ml_dtypes.float8_e4m3fn), scale


def e2m1_code_oracle(v: float) -> int:
    """Nearest e2m1 value, ties to the even code, -0 stored as +0."""
    mag = abs(v)
    best = min(range(8), key=lambda c: (abs(oracle.E2M1[c] - mag), c % 2))
    return best | (8 if v < 0 and best else 0)


def test_quantize_fp8_matches_formula(rng):
    x = (rng.standard_normal((5, 128)) * rng.uniform(0.01, 100, (5, 1))).astype(np.float32)
    x[4] = 0.0  # amax floor
    q, s = quant.quantize_fp8(jnp.asarray(x))
    for r in range(5):
        want_q, want_s = fp8_oracle(x[r])
        assert np.float32(s[r]) == want_s
        np.testing.assert_array_equal(np.asarray(q[r]).view(np.uint8), want_q.view(np.uint8))


def test_quantize_mxfp4_matches_formula(rng):
    x = (rng.standard_normal((3, 64)) * rng.uniform(0.01, 50, (3, 1))).astype(np.float32)
    x[0, :32] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, 6.0] + [0.0] * 23  # ties, -0
    packed, exp = quant.quantize_mxfp4(jnp.asarray(x))
    packed, exp = np.asarray(packed), np.asarray(exp)
    for r in range(3):
        for blk in range(2):
            vals = x[r, blk * 32 : (blk + 1) * 32]
            amax = max(float(np.abs(vals).max()), 1e-4)
            e = min(max(math.ceil(math.log2(np.float32(amax) / np.float32(6.0))) + 127, 1), 254)
            assert exp[r, blk] == e
            inv = np.float32(1.0) / np.float32(2.0 ** (e - 127))
            for i, v in enumerate(vals):
                col = blk * 32 + i
                code = (packed[r, col // 2] >> (4 * (col % 2))) & 0xF
                assert code == e2m1_code_oracle(float(v * inv)), (r, col, v)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_write_cache_page_layout(rng, fmt):
    pages, p, d = 4, 16, 64
    keys = rng.standard_normal((10, d)).astype(np.float32)
    slots = np.array([0, 5, 17, 63, -1, 64, 1000, 33, 48, 15], np.int32)
    cache = dj.PagedIndexCache.zeros(pages, p, d, fmt)
    out = jax.jit(dj.write_cache, donate_argnums=0)(cache, jnp.asarray(keys), jnp.asarray(slots))
    data = np.asarray(out.data)
    assert data.shape == (pages, p, 1, d + 4 if fmt == "fp8" else d // 2 + 4)
    written = set()
    for key, slot in zip(keys, slots):
        if not 0 <= slot < pages * p:
            continue
        written.add(int(slot))
        k, s = oracle.cache_token(data, fmt, slot // p, slot % p)
        if fmt == "fp8":
            want_q, want_s = fp8_oracle(key)
            assert np.float32(s) == want_s
            np.testing.assert_array_equal(k, want_q.astype(np.float64))
        else:
            # e2m1 steps are at most 2 (between 4 and 6) times a scale < amax / 3
            np.testing.assert_allclose(k, key, atol=np.abs(key).max() / 3)
    for slot in set(range(pages * p)) - written:  # nothing else touched
        k, s = oracle.cache_token(data, fmt, slot // p, slot % p)
        assert not k.any() and s in (0.0, 1.0)


def test_mxfp4_cache_scale_word_holds_four_exponents(rng):
    keys = rng.standard_normal((1, 128)).astype(np.float32) * np.repeat([1, 10, 100, 1000], 32)
    out = dj.write_cache(
        dj.PagedIndexCache.zeros(1, 8, 128, "mxfp4"), jnp.asarray(keys), jnp.array([3], jnp.int32)
    )
    flat = np.asarray(out.data).reshape(-1)
    word = flat[8 * 64 + 3 * 4 : 8 * 64 + 3 * 4 + 4]
    _, exp = quant.quantize_mxfp4(jnp.asarray(keys))
    np.testing.assert_array_equal(word, np.asarray(exp)[0])


def test_quantize_queries_fp8_folds_scale_into_weights(rng):
    q = rng.standard_normal((2, 1, 4, 128)).astype(np.float32)
    w = rng.standard_normal((2, 1, 4)).astype(np.float32)
    bundle = dj.quantize_queries(jnp.asarray(q), jnp.asarray(w))
    for b in range(2):
        for h in range(4):
            want_q, want_s = fp8_oracle(q[b, 0, h])
            np.testing.assert_array_equal(
                np.asarray(bundle.values[b, 0, h]).view(np.uint8), want_q.view(np.uint8)
            )
            assert np.float32(bundle.weights[b, 0, h]) == np.float32(w[b, 0, h] * want_s)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: dj.write_cache(
                dj.PagedIndexCache.zeros(2, 8, 64), jnp.zeros((3, 32)), jnp.zeros(3, jnp.int32)
            ),
            "keys must have shape",
        ),
        (
            lambda: dj.write_cache(
                dj.PagedIndexCache.zeros(2, 8, 64), jnp.zeros((3, 64)), jnp.zeros(3, jnp.float32)
            ),
            "slots must have an integer",
        ),
        (lambda: dj.PagedIndexCache(jnp.zeros((2, 8, 68), jnp.uint8)), "PagedIndexCache.data"),
        (lambda: dj.PagedIndexCache(jnp.zeros((2, 8, 1, 68), jnp.int8)), "PagedIndexCache.data"),
        (lambda: dj.PagedIndexCache(jnp.zeros((2, 8, 1, 28), jnp.uint8), "mxfp4"), "valid mxfp4"),
        (lambda: dj.PagedIndexCache(jnp.zeros((2, 8, 1, 100), jnp.uint8), "mxfp4"), "valid mxfp4"),
        (lambda: dj.quantize_queries(jnp.zeros((2, 4, 64)), jnp.zeros((2, 4))), "q must have rank"),
        (lambda: dj.quantize_queries(jnp.zeros((2, 1, 4, 64)), jnp.zeros((2, 4))), "weights"),
        (
            lambda: dj.quantize_queries(jnp.zeros((2, 1, 4, 64)), jnp.zeros((2, 1, 4)), "int4"),
            "format",
        ),
    ],
)
def test_quant_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
