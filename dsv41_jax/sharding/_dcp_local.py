"""Decode context parallel: a device's part of a published candidate table, over its own
positions (`dcp_select`'s sparse path). Internal: a module of its own so that the tests check
every layout through `local_table` directly, while dcp.py keeps to the public names it exports
(tests/test_api_docs.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax._dispatch import Implementation
from dsv41_jax.blocks import sort_candidate_blocks
from dsv41_jax.ordering import num_blocks
from dsv41_jax.types import CandidateTable


def _spread_evenly(b: int, world: int, interleave: int) -> bool:
    """Every global block's runs of I positions spread evenly over the devices (B / W each)."""
    return interleave % b != 0 and b % interleave == 0 and (b // interleave) % world == 0


def _local_block_size(b: int, world: int, interleave: int) -> int:
    """The size of one global block's part on a device, when every part has one size."""
    if interleave % b == 0:
        return b  # a block lies inside one run of I positions: whole on one device
    return b // world if _spread_evenly(b, world, interleave) else 1


def local_table(
    table: CandidateTable,
    global_rows: jax.Array,
    local_rows: jax.Array,
    row_bt: jax.Array,
    world: int,
    rank: int | jax.Array,
    interleave: int,
    page_size: int,
    implementation: Implementation,
) -> CandidateTable:
    """This device's part of the published (global) blocks as a CandidateTable over its own
    positions: local block ids of `_local_block_size` (the table's `block_size`), its own page
    table's slots; what `dcp_select(path="sparse")` scores. A global
    block's positions on one device are one contiguous local run (consecutive runs of I on a
    device are consecutive locally), so every case is a set of local blocks."""
    b, w, i = table.block_size, world, interleave
    lb = _local_block_size(b, w, i)
    # Any table (hand-made too): ids outside the row's [0, nblocks) name no position, and are
    # dropped before they are turned into positions (where a large id could wrap into the row).
    # Repeats are dropped by the sort below, as the mask path counts a block once.
    real = (table.blocks >= 0) & (table.blocks < num_blocks(global_rows, b)[:, None])
    blocks = jnp.where(real, table.blocks, 0).astype(jnp.int32)
    if _spread_evenly(b, w, i):
        selected = jnp.where(real, blocks, -1)  # local block j holds global block j's part
    else:
        t = jnp.arange(b if lb == 1 else 1, dtype=jnp.int32)
        g = (blocks * b)[:, :, None] + t[None, None]
        local = (g // (i * w)) * i + g % i
        on_me = real[:, :, None] & ((g // i) % w == rank)
        selected = jnp.where(on_me, local // lb, -1).reshape(table.blocks.shape[0], -1)
    return sort_candidate_blocks(
        selected,
        local_rows,
        row_bt,
        block_size=lb,
        page_size=page_size,
        implementation=implementation,
    )
