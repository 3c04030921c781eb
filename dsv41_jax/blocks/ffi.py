"""`implementation="ffi"` of sort_candidate_blocks: the CUDA counting sort (cuda/)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _ext
from dsv41_jax.topk.ffi import CANDIDATE_BLOCKS, radix_topk
from dsv41_jax.types import CandidateTable

TARGET = "dsv41_sort_candidate_blocks"
MAX_BLOCKS = 1 << 20  # one CTA's bitmap per row (128 KiB of shared memory)
MAX_CANDIDATES = 4096  # the table is staged in shared memory before it is written out


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
    if -(-block_table.shape[1] * page_size // block_size) > MAX_BLOCKS:
        raise NotImplementedError(f"{TARGET}: rows longer than 2^20 blocks")
    if c > MAX_CANDIDATES:
        raise NotImplementedError(f"{TARGET}: more than {MAX_CANDIDATES} candidates per row")
    i32 = jnp.int32
    out = (
        jax.ShapeDtypeStruct((rows, c), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows, c), i32),
    )
    blocks, count, valid, physical = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        selected.astype(i32),
        lengths.astype(i32),
        block_table.astype(i32),
        block_size=np.int32(block_size),
        page_size=np.int32(page_size),
    )
    return CandidateTable(blocks, count, valid, physical, block_size=block_size)


def select_candidate_blocks(block_scores, lengths, num_candidates, block_size) -> jax.Array:
    return radix_topk(
        block_scores, lengths, num_candidates, None, None, block_size, CANDIDATE_BLOCKS
    )
