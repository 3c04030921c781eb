"""Random inputs of the indexer's ops, shared by the test suite, the benchmarks and the probes
of scripts/probes (one case factory: a benchmark row and a test of the same op build their
inputs the same way).

Host-side builders take a `numpy.random.Generator`; `device_cache` draws a large cache on the
device (1M-position caches would take seconds through the host).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax.quant import quantize_keys, quantize_queries, write_cache
from dsv41_jax.types import KeyBuffer, PagedIndexCache, QueryBundle


def normal(rng: np.random.Generator, shape) -> jax.Array:
    """float32 standard-normal values."""
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32))


def query(rng, batch, next_n, heads, head_dim, fmt="fp8") -> QueryBundle:
    """A quantized QueryBundle `[batch, next_n, heads, head_dim]` with normal weights."""
    q = rng.standard_normal((batch, next_n, heads, head_dim)).astype(np.float32)
    w = rng.standard_normal((batch, next_n, heads)).astype(np.float32)
    return quantize_queries(jnp.asarray(q), jnp.asarray(w), fmt)


def _scaled_keys(rng, tokens, head_dim) -> np.ndarray:
    """Normal keys with a per-token magnitude in [0.1, 4): the scales differ token to token."""
    k = rng.standard_normal((tokens, head_dim)).astype(np.float32)
    return k * rng.uniform(0.1, 4.0, (tokens, 1)).astype(np.float32)


def packed_keys(rng, tokens, head_dim=128, fmt="fp8") -> KeyBuffer:
    """A ragged prefill KeyBuffer of `tokens` keys."""
    return quantize_keys(jnp.asarray(_scaled_keys(rng, tokens, head_dim)), fmt)


def paged_cache(rng, batch, max_pages, page_size, head_dim, fmt="fp8", spare_pages=3):
    """(cache, block_table): every request's pages scattered over a shuffled pool, plus
    `spare_pages` unused pages."""
    num_pages = batch * max_pages + spare_pages
    perm = rng.permutation(num_pages).astype(np.int32)
    block_table = perm[: batch * max_pages].reshape(batch, max_pages)
    cache = PagedIndexCache.zeros(num_pages, page_size, head_dim, fmt)
    cache = write_cache(
        cache,
        jnp.asarray(_scaled_keys(rng, num_pages * page_size, head_dim)),
        jnp.arange(num_pages * page_size, dtype=jnp.int32),
    )
    return cache, jnp.asarray(block_table)


def device_cache(key: jax.Array, tokens: int, sharding=None) -> PagedIndexCache:
    """A random fp8 cache of `tokens` positions in 64-token pages, drawn on the device (bytes
    0..119: finite e4m3 values and scales)."""
    pages = tokens // 64
    data = jax.jit(
        lambda k: jax.random.bits(k, (pages, 64, 1, 132), jnp.uint8) % 120,
        out_shardings=sharding,
    )(key)
    return PagedIndexCache(data)


def decode_inputs(rng, key, batch, context, layers=1, sharding=None):
    """(caches, queries, context_lens, block_table) of a V4.1-shaped decode step: one device
    cache and one 32-head query bundle per layer, every request `context` positions long on
    shuffled pages."""
    pages = context // 64
    caches = [device_cache(k, batch * context, sharding) for k in jax.random.split(key, layers)]
    bt = jnp.asarray(rng.permutation(batch * pages).astype(np.int32).reshape(batch, pages))
    queries = [query(rng, batch, 1, 32, 128) for _ in range(layers)]
    return caches, queries, jnp.full((batch,), context, jnp.int32), bt


def scores(rng, rows, n, kind="random") -> np.ndarray:
    """float32 score rows of a flavour: "random", "ties" (few distinct values), "equal",
    "special" (NaN, -inf, +inf and -0.0 mixed in), "denormal" (denormals of both signs and
    +-0.0, half of them of the four smallest magnitudes: ties), or "ascending" / "descending"
    (sorted rows: the best keys all at one end, the worst case for an estimate from a prefix)."""
    if kind == "random":
        return rng.standard_normal((rows, n)).astype(np.float32)
    if kind == "ties":
        return rng.integers(0, 4, (rows, n)).astype(np.float32)
    if kind == "equal":
        return np.full((rows, n), 1.5, np.float32)
    if kind in ("ascending", "descending"):
        ramp = np.arange(n, dtype=np.float32) if kind == "ascending" else np.arange(n, 0, -1.0)
        return np.tile(ramp.astype(np.float32), (rows, 1))
    if kind == "special":
        s = rng.integers(-3, 3, (rows, n)).astype(np.float32)
        pick = rng.random((rows, n))
        s[pick < 0.15] = np.nan
        s[(pick >= 0.15) & (pick < 0.3)] = -np.inf
        s[(pick >= 0.3) & (pick < 0.35)] = np.inf
        s[(pick >= 0.35) & (pick < 0.45)] = -0.0
        return s
    if kind == "denormal":
        few = rng.random((rows, n)) < 0.5
        spread = rng.integers(1, 1 << 23, (rows, n))
        magnitude = np.where(few, rng.integers(0, 4, (rows, n)), spread)
        sign = rng.integers(0, 2, (rows, n)).astype(np.uint32) << 31
        return (magnitude.astype(np.uint32) | sign).view(np.float32)
    raise ValueError(kind)
