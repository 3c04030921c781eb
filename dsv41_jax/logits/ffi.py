"""`implementation="ffi"` of paged_mqa_logits: DeepGEMM's SM90 FP8 kernel through XLA FFI.

Supported: fp8 cache, head_dim 128, page 64, 32 or 64 heads, next_n 1 or 2, `num_columns` a
multiple of 256 covering the page table (the kernel writes whole 256-position splits). Anything
else raises NotImplementedError, so `implementation=None` falls back (with a log line).
Columns at or past a row's length are left as the kernel wrote them (unspecified): no
selection op reads them. Positions on invalid page ids are NaN, as in the reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _ext
from dsv41_jax.types import PagedIndexCache, QueryBundle

TARGET = "dsv41_sm90_paged_mqa_logits"
SCHEDULE_ROWS = 257  # the handler's schedule workspace: [max SMs + 1, 2]


def paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    num_columns: int,
) -> jax.Array:
    _ext.require_gpu(TARGET)
    max_pages = block_table.shape[1]
    unsupported = [
        (cache.format != "fp8", "needs the fp8 cache"),
        (cache.head_dim != 128 or cache.page_size != 64, "needs head_dim 128 and page_size 64"),
        (query.num_heads not in (32, 64), "needs 32 or 64 heads"),
        (query.next_n not in (1, 2), "needs next_n 1 or 2"),
        (
            num_columns % 256 or num_columns < max_pages * 64,
            "needs num_columns a multiple of 256 covering the page table",
        ),
        (query.batch > 1024, "needs at most 1024 requests"),
    ]
    for bad, why in unsupported:
        if bad:
            raise NotImplementedError(f"{TARGET}: {why}")
    # The kernel trusts lengths: clamp them to the page table so nothing is read past it.
    lens = jnp.clip(context_lens.astype(jnp.int32), 0, max_pages * 64)
    out = (
        jax.ShapeDtypeStruct((query.num_rows, num_columns), jnp.float32),
        jax.ShapeDtypeStruct((SCHEDULE_ROWS, 2), jnp.int32),
    )
    logits, _ = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        query.values, query.weights, cache.data, lens, block_table.astype(jnp.int32)
    )
    return logits
