"""`implementation="ffi"` of sort_candidate_blocks: the CUDA counting sort (cuda/)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext
from dsv41_jax._device import Device, device_record, ffi_declines
from dsv41_jax.types import CandidateTable

TARGET = "dsv41_sort_candidate_blocks"


def supports(
    device: Device,
    selected: jax.Array,
    lengths: jax.Array,
    block_table: jax.Array,
    block_size: int,
    page_size: int,
) -> str | None:
    """Why `device` runs no counting sort for these inputs (None: it does). One CTA per row: a
    shared-memory bitmap of the row's blocks, the table staged before it is written out; both
    bound the shapes (limits defined by the kernel, read from the extension)."""
    why = ffi_declines(device, TARGET)
    if why is not None:
        return why
    rows, c = selected.shape
    max_blocks, max_c = device.limit("sort_max_blocks"), device.limit("sort_max_candidates")
    if rows == 0 or c == 0:  # no zero-size custom-call operands (see _ext.require_gpu)
        return f"{TARGET}: empty inputs"
    if -(-block_table.shape[1] * page_size // block_size) > max_blocks:
        return f"{TARGET}: rows longer than {max_blocks} blocks"
    if c > max_c:
        return f"{TARGET}: more than {max_c} candidates per row"
    return None


def sort_candidate_blocks(
    selected: jax.Array,
    lengths: jax.Array,
    block_table: jax.Array,
    block_size: int,
    page_size: int,
) -> CandidateTable:
    _ext.require_gpu(TARGET)
    why = supports(device_record(), selected, lengths, block_table, block_size, page_size)
    if why is not None:
        raise NotImplementedError(why)
    rows, c = selected.shape
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
        _checks.int32(block_table),  # the kernel maps page ids whose slots pass int32 to -1
        block_size=np.int32(block_size),
        page_size=np.int32(page_size),
    )
    return CandidateTable(blocks, count, valid, physical, block_size=block_size)
