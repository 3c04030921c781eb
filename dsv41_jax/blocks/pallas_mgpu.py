"""`implementation="pallas"` of block_amax: a Mosaic GPU kernel (plgpu.kernel), any Hopper GPU.

The row is viewed as `[blocks, B]`; each CTA reduces one tile of 256, 128 or 64 blocks (the
largest that divides the row) of one row. A tile is one TMA box (both dims <= 256), loaded with
the WGMMA register layout so the per-block max is a lowered row reduction. Positions at or past
the row's length and NaNs are masked to -inf before the max; the newest block is pinned to +inf.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from dsv41_jax import _checks, _mgpu

TILE_BLOCKS = 256


@dataclasses.dataclass(frozen=True)
class BlockAmaxConfig:
    block_size: int = 8
    tile_blocks: int = TILE_BLOCKS

    def __post_init__(self) -> None:
        if self.block_size not in (8, 16):
            raise NotImplementedError("block_amax pallas: block_size must be 8 or 16")
        if self.tile_blocks % 64 or not 64 <= self.tile_blocks <= 256:
            raise ValueError("tile_blocks must be a multiple of 64 in [64, 256]")


def _kernel(scores, lengths, out, tile, result, bar, *, cfg: BlockAmaxConfig, pin: bool):
    row = jax.lax.axis_index("row")
    t = jax.lax.axis_index("tile")
    tb, b = cfg.tile_blocks, cfg.block_size
    plgpu.copy_gmem_to_smem(scores.at[row, pl.ds(t * tb, tb)], tile, bar)
    length = lengths[row]
    nblocks = (length + b - 1) // b
    plgpu.barrier_wait(bar)
    v = plgpu.load(tile, layout=plgpu.Layout.WGMMA, optimized=False)
    blk = t * tb + plgpu.broadcasted_iota(jnp.int32, (tb, b), 0, layout=plgpu.Layout.WGMMA)
    lane = plgpu.broadcasted_iota(jnp.int32, (tb, b), 1, layout=plgpu.Layout.WGMMA)
    visible = (blk * b + lane < length) & (v == v)  # v == v: not NaN
    m = jnp.max(jnp.where(visible, v, -jnp.inf), axis=1)
    if pin:
        newest = t * tb + plgpu.broadcasted_iota(
            jnp.int32, (tb,), 0, layout=plgpu.Layout.WGMMA.reduce(1)
        )
        m = jnp.where(newest == nblocks - 1, jnp.inf, m)
    result[...] = m
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(result, out.at[row, pl.ds(t * tb, tb)])
    plgpu.wait_smem_to_gmem(0)


@functools.partial(jax.jit, static_argnames=("cfg", "pin", "interpret"))
def _block_amax(scores, lengths, *, cfg: BlockAmaxConfig, pin: bool, interpret: bool = False):
    rows, n = scores.shape
    nb = n // cfg.block_size
    blocks = scores.reshape(rows, nb, cfg.block_size)
    kernel = plgpu.kernel(
        functools.partial(_kernel, cfg=cfg, pin=pin),
        out_type=jax.ShapeDtypeStruct((rows, nb), jnp.float32),
        scratch_types=[
            plgpu.SMEM((cfg.tile_blocks, cfg.block_size), jnp.float32),
            plgpu.SMEM((cfg.tile_blocks,), jnp.float32),
            plgpu.Barrier(num_arrivals=1),
        ],
        grid=(rows, nb // cfg.tile_blocks),
        grid_names=("row", "tile"),
        interpret=_mgpu.interpret_params(interpret),
    )
    return kernel(blocks, lengths)


def block_amax(scores, lengths, block_size, starts, pin_newest, *, interpret: bool = False):
    _mgpu.require_gpu("block_amax", interpret)
    if starts is not None:
        raise NotImplementedError("block_amax pallas: rows with starts (prefill) not supported")
    _mgpu.require_float32(scores, "block_amax")
    tile = _mgpu.whole_tile(scores.shape[1] // block_size)
    if scores.shape[1] % block_size or tile is None:
        raise NotImplementedError(
            f"block_amax pallas: row length must be a multiple of {64 * block_size}"
        )
    cfg = BlockAmaxConfig(block_size=block_size, tile_blocks=tile)
    lengths = jnp.clip(_checks.int32(lengths), 0, scores.shape[1])
    return _block_amax(scores, lengths, cfg=cfg, pin=pin_newest, interpret=interpret)
