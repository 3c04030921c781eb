"""Quantization (FP8 e4m3 per token, MXFP4 e2m1 with ue8m0 per 32) and paged cache writes.

The formulas follow DeepGEMM's test utilities so caches written here are bit-identical to the
ones its kernels are tested with: FP8 scale = max(amax, 1e-4) / 448 (fp32); MXFP4 scale =
2^ceil(log2(max(amax, 1e-4) / 6)) as a ue8m0 exponent, values rounded to nearest even e2m1,
negative zero stored as +0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from dsv41_jax import _checks
from dsv41_jax.config import CacheFormat
from dsv41_jax.types import KeyBuffer, PagedIndexCache, QueryBundle

FP8_MAX = 448.0
FP4_MAX = 6.0
MX_BLOCK = 32
_AMAX_FLOOR = 1e-4
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


# ----------------------------------------------------------------------------- element codecs
def _div_const(x: jax.Array, c: float) -> jax.Array:
    """Correctly rounded x / c. XLA rewrites division by a broadcast scalar into a multiply by its
    reciprocal (1 ulp off); an opaque full-size divisor keeps DeepGEMM's torch-side scales exact."""
    return x / lax.optimization_barrier(jnp.full(x.shape, c, jnp.float32))


def ceil_to_ue8m0(x: jax.Array) -> jax.Array:
    """ue8m0 exponent byte (uint8) of the smallest power of two >= x > 0, clamped to [1, 254]."""
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
    exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).astype(jnp.int32)
    return jnp.clip(exp, 1, 254).astype(jnp.uint8)


def ue8m0_to_float(e: jax.Array) -> jax.Array:
    """ue8m0 exponent bytes -> float32 powers of two (byte 0 decodes to 0, as in DeepGEMM)."""
    return lax.bitcast_convert_type(e.astype(jnp.int32) << 23, jnp.float32)


def e2m1_encode(x: jax.Array) -> jax.Array:
    """float32 (already scaled to [-6, 6]) -> 4-bit e2m1 codes in uint8, round to nearest even.

    The code is the number of rounding boundaries below |x|; at a tie the boundary counts when
    it leads to the even code. Negative zero is stored as +0.
    """
    ax = jnp.abs(x)
    code = jnp.zeros(x.shape, jnp.uint8)
    for boundary, to_even_above in zip(_E2M1_MIDPOINTS, (False, True) * 3 + (False,)):
        passed = ax >= boundary if to_even_above else ax > boundary
        code = code + passed.astype(jnp.uint8)
    return jnp.where((x < 0) & (code != 0), code | 8, code)


def e2m1_decode(code: jax.Array) -> jax.Array:
    """4-bit e2m1 codes (uint8, low nibble) -> float32."""
    table = jnp.asarray(_E2M1_VALUES, jnp.float32)
    mag = table[(code & 7).astype(jnp.int32)]
    return jnp.where((code & 8) != 0, -mag, mag)


def unpack_e2m1(packed: jax.Array) -> jax.Array:
    """uint8 `[..., n/2]` (low nibble = even element) -> float32 `[..., n]`."""
    lo, hi = e2m1_decode(packed & 0xF), e2m1_decode(packed >> 4)
    return jnp.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# ----------------------------------------------------------------------------- tensor quantizers
def quantize_fp8(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row FP8: `x [..., D]` -> (float8_e4m3fn `[..., D]`, float32 scale `[...]`)."""
    x = x.astype(jnp.float32)
    scale = _div_const(jnp.maximum(jnp.max(jnp.abs(x), axis=-1), _AMAX_FLOOR), FP8_MAX)
    q = jnp.clip(x * (1.0 / scale)[..., None], -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return q, scale


def quantize_mxfp4(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MXFP4: `x [..., D]` -> (packed uint8 `[..., D/2]`, ue8m0 exponents uint8 `[..., D/32]`)."""
    *lead, d = x.shape
    if d % MX_BLOCK:
        raise ValueError(f"quantize_mxfp4: last dim must be a multiple of 32, got {d}")
    blocks = x.astype(jnp.float32).reshape(*lead, d // MX_BLOCK, MX_BLOCK)
    exp = ceil_to_ue8m0(
        _div_const(jnp.maximum(jnp.max(jnp.abs(blocks), axis=-1), _AMAX_FLOOR), FP4_MAX)
    )
    codes = e2m1_encode(blocks * (1.0 / ue8m0_to_float(exp))[..., None]).reshape(*lead, d)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, exp


def dequantize_mxfp4(packed: jax.Array, exp: jax.Array) -> jax.Array:
    """Inverse of `quantize_mxfp4` (exact): float32 `[..., D]`."""
    vals = unpack_e2m1(packed)
    *lead, d = vals.shape
    scale = ue8m0_to_float(exp)[..., None]
    return (vals.reshape(*lead, d // MX_BLOCK, MX_BLOCK) * scale).reshape(*lead, d)


def quantize_queries(q: jax.Array, weights: jax.Array, format: CacheFormat = "fp8") -> QueryBundle:
    """Quantize index queries `q [batch, next_n, H, D]` with head weights `[batch, next_n, H]`.

    FP8: one fp32 scale per (row, head), folded into the weights (`relu` commutes with a positive
    scale). MXFP4: ue8m0 scales per 32 elements carried in the bundle, weights unchanged.
    """
    q, weights = _checks.array(q, "q"), _checks.array(weights, "weights")
    _checks.rank(q, 4, "q")
    _checks.floating(q, "q")
    _checks.shape(weights, q.shape[:3], "weights")
    weights = jnp.asarray(weights).astype(jnp.float32)
    if format == "fp8":
        values, scale = quantize_fp8(q)
        return QueryBundle(values, weights * scale, None, "fp8")
    if format == "mxfp4":
        values, exp = quantize_mxfp4(q)
        return QueryBundle(values, weights, exp, "mxfp4")
    raise ValueError(f"quantize_queries: format must be 'fp8' or 'mxfp4', got {format!r}")


def quantize_keys(k: jax.Array, format: CacheFormat = "fp8") -> KeyBuffer:
    """Quantize packed prefill keys `k [T, D]` into a KeyBuffer."""
    k = _checks.array(k, "k")
    _checks.rank(k, 2, "k")
    _checks.floating(k, "k")
    if format == "fp8":
        return KeyBuffer(*quantize_fp8(k), "fp8")
    if format == "mxfp4":
        return KeyBuffer(*quantize_mxfp4(k), "mxfp4")
    raise ValueError(f"quantize_keys: format must be 'fp8' or 'mxfp4', got {format!r}")


def dequantize_keys(keys: KeyBuffer) -> jax.Array:
    """float32 `[T, D]` keys with their scale applied."""
    if keys.format == "fp8":
        return keys.values.astype(jnp.float32) * keys.scales[:, None]
    return dequantize_mxfp4(keys.values, keys.scales)


# ----------------------------------------------------------------------------- paged cache I/O
def split_pages(cache: PagedIndexCache) -> tuple[jax.Array, jax.Array]:
    """(value bytes `[pages, P, value_bytes]`, scale bytes `[pages, P, 4]`) of every page."""
    pages, p, _, row = cache.data.shape
    flat = cache.data.reshape(pages, p * row)
    value_bytes = row - 4
    return (
        flat[:, : p * value_bytes].reshape(pages, p, value_bytes),
        flat[:, p * value_bytes :].reshape(pages, p, 4),
    )


def write_cache(cache: PagedIndexCache, keys: jax.Array, slots: jax.Array) -> PagedIndexCache:
    """Quantize `keys [T, D]` and scatter them into the cache at token `slots [T]` (int32).

    Slots outside `[0, capacity)` (e.g. -1 padding) are skipped. Pure and jit-friendly; donate
    `cache` (`jax.jit(..., donate_argnums=0)`) to update it in place.
    """
    if not isinstance(cache, PagedIndexCache):
        raise ValueError(
            f"cache must be a PagedIndexCache (e.g. PagedIndexCache.zeros(...)), got "
            f"{type(cache).__name__}"
        )
    cache.check_one_layer("cache")
    keys, slots = _checks.array(keys, "keys"), _checks.array(slots, "slots")
    _checks.rank(keys, 2, "keys")
    _checks.floating(keys, "keys")
    _checks.shape(keys, (None, cache.head_dim), "keys")
    _checks.shape(slots, (keys.shape[0],), "slots")
    _checks.integer(slots, "slots")
    pages, p, _, row = cache.data.shape
    value_bytes = row - 4
    if cache.format == "fp8":
        vals, scale = quantize_fp8(keys)
        vals = lax.bitcast_convert_type(vals, jnp.uint8)
        sbytes = lax.bitcast_convert_type(scale, jnp.uint8)  # [T, 4]
    else:
        vals, exp = quantize_mxfp4(keys)
        pad = 4 - exp.shape[-1]  # fewer than four 32-blocks: pad with 2^0
        sbytes = jnp.pad(exp, ((0, 0), (0, pad)), constant_values=127) if pad else exp
    slots = _checks.int32(slots)  # saturated: 2**32 + 3 stays out of range, not slot 3
    ok = (slots >= 0) & (slots < pages * p)
    page = jnp.where(ok, slots // p, pages)  # out-of-range row: dropped by the scatter
    off = slots % p
    flat = cache.data.reshape(pages, p * row)
    vcol = off[:, None] * value_bytes + jnp.arange(value_bytes)[None]
    scol = p * value_bytes + off[:, None] * 4 + jnp.arange(4)[None]
    flat = flat.at[page[:, None], vcol].set(vals, mode="drop")
    flat = flat.at[page[:, None], scol].set(sbytes, mode="drop")
    return PagedIndexCache(flat.reshape(cache.data.shape), cache.format)
