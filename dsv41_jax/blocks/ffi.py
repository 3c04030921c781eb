"""`implementation="ffi"` of sort_candidate_blocks: the CUDA counting sort (cuda/)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext
from dsv41_jax.types import CandidateTable

TARGET = "dsv41_sort_candidate_blocks"


def sort_candidate_blocks(
    selected: jax.Array,
    lengths: jax.Array,
    block_table: jax.Array,
    block_size: int,
    page_size: int,
) -> CandidateTable:
    _ext.require_gpu(TARGET)
    rows, c = selected.shape
    if rows == 0 or c == 0:  # no zero-size custom-call operands (see _ext.require_gpu)
        raise NotImplementedError(f"{TARGET}: empty inputs")
    # One CTA per row: a shared-memory bitmap of the row's blocks, the table staged before it is
    # written out; both bound the shapes (limits defined by the kernel, read from the extension).
    max_blocks, max_c = _ext.limit("sort_max_blocks"), _ext.limit("sort_max_candidates")
    if -(-block_table.shape[1] * page_size // block_size) > max_blocks:
        raise NotImplementedError(f"{TARGET}: rows longer than {max_blocks} blocks")
    if c > max_c:
        raise NotImplementedError(f"{TARGET}: more than {max_c} candidates per row")
    i32 = jnp.int32
    out = (
        jax.ShapeDtypeStruct((rows, c), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows, c), i32),
    )
    # Saturated, not wrapped (the contract's index types): an int64 id 2**32 + 3 is no block 3.
    blocks, count, valid, physical = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        _checks.int32(selected),
        _checks.int32(lengths),
        _checks.int32(block_table),
        block_size=np.int32(block_size),
        page_size=np.int32(page_size),
    )
    return CandidateTable(blocks, count, valid, physical, block_size=block_size)
