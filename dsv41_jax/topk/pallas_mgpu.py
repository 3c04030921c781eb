"""`implementation="pallas"` of topk and select_candidate_blocks: Mosaic GPU kernels (plgpu.kernel).

Mosaic GPU has no scatter, histogram, argmax or cumsum, so the exact selection is built from what
it has (see BENCHMARKS.md for what that costs):

1. Scores become order-preserving int32 keys (INT32_MIN = never selected). A **counting kernel**
   counts, per 2048-position tile, the keys >= each of 16 thresholds: vectorised compares and row
   reductions on tiles in the WGMMA layout. Eight passes of 4 bits each (thresholds
   `prefix + j << shift`) give the exact k-th key T; the per-tile sums between passes are XLA.
2. The same kernel at thresholds (T, T + 1) gives every tile's count above T and of ties at T;
   XLA turns them into each tile's output offset and first tie rank (ties go by position).
3. An **emission kernel** builds per-block bitmasks of "above" and "tie" positions with vector
   code, then one warp walks the tile's 256 blocks in order with scalar code (Lane lowering
   semantics: the only way to write data-dependent addresses) and writes the tile's selected
   positions, ascending, to its own slice of a scratch buffer.
4. An XLA gather concatenates the tiles' slices into the ascending, -1 padded output.

The candidate mask is fused: block membership is loaded per tile and broadcast over the block's
positions (no masked copy of the scores). Candidate-block selection runs the same kernels on int32
keys that XLA computes from the (small) block-score array: the newest-block pin and the
NaN / -inf ranking then live in one jnp function instead of inside the kernels (the in-kernel
version of those rules miscompiled on the H200 while passing interpret mode).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from dsv41_jax import _checks, _mgpu

EXCLUDED = -(2**31)  # key of anything that may not be selected
LOWEST = EXCLUDED + 1  # candidate blocks scoring NaN / -inf: last, but selectable
PINNED = 2**31 - 2  # the newest candidate block (T + 1 must not overflow)
NUM_THRESHOLDS = 16
POSITIONS, KEYS = 0, 1  # float scores / precomputed int32 keys
_LANE = plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane)
_ROWS = plgpu.Layout.WGMMA.reduce(1)


def _ordered_key(v):
    """int32 keys in score order of scores with -0 already made +0 (jnp only: the kernels and
    the XLA candidate keys share it)."""
    bits = lax.bitcast_convert_type(v, jnp.int32)
    return jnp.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@dataclasses.dataclass(frozen=True)
class SelectConfig:
    """Static shape of one selection kernel: a tile of `tile_blocks` groups of `group` positions
    per CTA, the key mode (POSITIONS: float scores; KEYS: precomputed int32 keys), whether a
    block-membership row is loaded, and (emission only) the 128-wide rows of output per tile."""

    tile_blocks: int
    group: int
    mode: int
    has_member: bool
    cap_rows: int = 0


def _keys(v, first_block, tile_blocks, group, length, member, mode):
    """int32 keys of a `[tile_blocks, group]` tile (WGMMA layout) of one row."""
    blk = first_block + plgpu.broadcasted_iota(
        jnp.int32, (tile_blocks, group), 0, layout=plgpu.Layout.WGMMA
    )
    lane = plgpu.broadcasted_iota(jnp.int32, (tile_blocks, group), 1, layout=plgpu.Layout.WGMMA)
    pos = blk * group + lane
    if mode == KEYS:
        return jnp.where(pos < length, v, EXCLUDED)
    v = jnp.where(v == 0, 0.0, v)  # -0 ties +0
    key = _ordered_key(v)
    # Boolean vectors only combined with `&`: `~` fails to lower and `|` gave wrong lanes on the
    # H200 (interpret mode accepted both).
    ok = (pos < length) & (v == v) & (v != -jnp.inf)
    if member is not None:
        ok &= lax.broadcast_in_dim(member, (tile_blocks, group), (0,)) != 0
    return jnp.where(ok, key, EXCLUDED)


def _candidate_keys(block_scores: jax.Array, nblocks: jax.Array) -> jax.Array:
    """XLA: the int32 keys of candidate-block selection. Same order as the score keys; NaN / -inf
    blocks rank last but stay selectable (LOWEST); the newest block is pinned (PINNED)."""
    v = jnp.where(block_scores == 0, 0.0, block_scores)  # -0 ties +0
    key = _ordered_key(v)
    key = jnp.where(jnp.isnan(v) | (v == -jnp.inf), LOWEST, key)
    newest = jnp.arange(v.shape[1], dtype=jnp.int32)[None] == nblocks[:, None] - 1
    return jnp.where(newest, PINNED, key)


def _load_tile(scores, member, row, t, tb, tile, mtile, bar, has_member):
    plgpu.copy_gmem_to_smem(scores.at[row, pl.ds(t * tb, tb)], tile, bar)
    if has_member:
        plgpu.copy_gmem_to_smem(member.at[row, pl.ds(t * tb, tb)], mtile, bar)
    plgpu.barrier_wait(bar)
    v = plgpu.load(tile, layout=plgpu.Layout.WGMMA, optimized=False)
    m = plgpu.load(mtile, layout=_ROWS, optimized=False) if has_member else None
    return v, m


def _count_kernel(scores, lengths, member, thresholds, counts, tile, mtile, bar, *, cfg):
    tb, group, mode, has_member = cfg.tile_blocks, cfg.group, cfg.mode, cfg.has_member
    row, t = lax.axis_index("row"), lax.axis_index("tile")
    v, m = _load_tile(scores, member, row, t, tb, tile, mtile, bar, has_member)
    key = _keys(v, t * tb, tb, group, lengths[row], m, mode)
    valid = key != EXCLUDED
    for j in range(NUM_THRESHOLDS):
        c = jnp.sum(jnp.where(valid & (key >= thresholds[row, j]), 1, 0), axis=1)
        counts[row, t, j] = jnp.sum(c)


def _emit_kernel(scores, lengths, member, params, out, tile, mtile, masks, scal, buf, bar, *, cfg):
    tb, group, mode, has_member = cfg.tile_blocks, cfg.group, cfg.mode, cfg.has_member
    cap_rows = cfg.cap_rows
    row, t = lax.axis_index("row"), lax.axis_index("tile")
    v, m = _load_tile(scores, member, row, t, tb, tile, mtile, bar, has_member)
    key = _keys(v, t * tb, tb, group, lengths[row], m, mode)
    threshold = params[row, 0]
    valid = key != EXCLUDED
    lane = plgpu.broadcasted_iota(jnp.int32, (tb, group), 1, layout=plgpu.Layout.WGMMA)
    bit = jnp.left_shift(1, lane)
    masks[0] = jnp.sum(jnp.where(valid & (key > threshold), bit, 0), axis=1)
    masks[1] = jnp.sum(jnp.where(valid & (key == threshold), bit, 0), axis=1)
    buf[...] = jnp.full((cap_rows, 128), -1, jnp.int32)
    scal[0] = params[row, 1]  # ties still wanted in the row
    scal[1] = params[row, 2 + t]  # ties before this tile
    scal[2] = t * tb * group  # first position of the tile
    plgpu.commit_smem()

    def walk(w):
        @pl.when(w == 0)
        def _():
            need, base = scal[0], scal[2]

            def block(b, carry):
                count, ties = carry
                gt, eq = masks[0, b], masks[1, b]
                for j in range(group):
                    is_eq = (eq >> j) & 1
                    take = (((gt >> j) & 1) | (is_eq & (ties < need).astype(jnp.int32))) != 0

                    @pl.when(take)
                    def _():
                        buf[count // 128, count % 128] = base + b * group + j

                    count = count + take.astype(jnp.int32)
                    ties = ties + is_eq
                return count, ties

            lax.fori_loop(0, tb, block, (jnp.int32(0), scal[1]))

    plgpu.warp_map(walk)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(buf, out.at[row, t])
    plgpu.wait_smem_to_gmem(0)


def _scratch(tb, group, has_member, dtype):
    return [
        plgpu.SMEM((tb, group), dtype),
        plgpu.SMEM((tb,), jnp.int32),
        plgpu.Barrier(num_arrivals=2 if has_member else 1),
    ]


@functools.partial(jax.jit, static_argnames=("k", "mode", "group", "interpret"))
def _select(scores, lengths, member, *, k, mode, group, interpret=False):
    rows, n = scores.shape
    nbg = n // group
    tb = _mgpu.whole_tile(nbg)
    assert tb is not None  # the callers decline rows without a whole tile (_check)
    tiles = nbg // tb
    s3 = scores.reshape(rows, nbg, group)
    has_member = member is not None
    member_arg = member if has_member else jnp.zeros((rows, nbg), jnp.int32)
    ip = _mgpu.interpret_params(interpret)
    cfg = SelectConfig(tb, group, mode, has_member)
    count = plgpu.kernel(
        functools.partial(_count_kernel, cfg=cfg),
        out_type=jax.ShapeDtypeStruct((rows, tiles, NUM_THRESHOLDS), jnp.int32),
        scratch_types=_scratch(tb, group, has_member, scores.dtype),
        grid=(rows, tiles),
        grid_names=("row", "tile"),
        interpret=ip,
    )

    def counts_at(thresholds):
        return jnp.sum(count(s3, lengths, member_arg, thresholds), axis=1)

    # Exact k-th key, 4 bits per pass, in unsigned key order (signed key ^ 0x80000000).
    j = jnp.arange(NUM_THRESHOLDS, dtype=jnp.uint32)
    prefix = jnp.zeros((rows,), jnp.uint32)
    valid_total = None
    for p in range(8):
        shift = 28 - 4 * p
        t_u = prefix[:, None] + (j[None] << shift)
        c = counts_at(lax.bitcast_convert_type(t_u ^ jnp.uint32(0x80000000), jnp.int32))
        if p == 0:
            valid_total = c[:, 0]
        digit = jnp.sum(c[:, 1:] >= k, axis=1).astype(jnp.uint32)
        prefix = prefix + (digit << shift)
    threshold = lax.bitcast_convert_type(prefix ^ jnp.uint32(0x80000000), jnp.int32)
    # At most k valid keys: all of them are "above" the lowest key.
    threshold = jnp.where(valid_total <= k, jnp.int32(EXCLUDED), threshold)

    thr2 = jnp.concatenate(
        [
            threshold[:, None],
            threshold[:, None] + 1,
            jnp.full((rows, NUM_THRESHOLDS - 2), 2**31 - 1, jnp.int32),
        ],
        axis=1,
    )
    per_tile = count(s3, lengths, member_arg, thr2)
    gt, eq = per_tile[:, :, 1], per_tile[:, :, 0] - per_tile[:, :, 1]
    need_eq = jnp.maximum(k - jnp.sum(gt, axis=1), 0)
    eq_before = jnp.cumsum(eq, axis=1) - eq
    taken = gt + jnp.clip(need_eq[:, None] - eq_before, 0, eq)
    offset = jnp.cumsum(taken, axis=1) - taken
    total = jnp.sum(taken, axis=1)

    cap = min(k, tb * group)
    cap_rows = -(-cap // 128)
    params = jnp.concatenate([threshold[:, None], need_eq[:, None], eq_before], axis=1)
    tile_smem, member_smem, barrier = _scratch(tb, group, has_member, scores.dtype)
    emit = plgpu.kernel(
        functools.partial(_emit_kernel, cfg=dataclasses.replace(cfg, cap_rows=cap_rows)),
        out_type=jax.ShapeDtypeStruct((rows, tiles, cap_rows, 128), jnp.int32),
        scratch_types=[
            tile_smem,
            member_smem,
            plgpu.SMEM((2, tb), jnp.int32),  # per-block bitmasks: above T, tie at T
            plgpu.SMEM((4,), jnp.int32),  # scalars handed to the emitting warp
            plgpu.SMEM((cap_rows, 128), jnp.int32),  # the tile's selected positions
            barrier,
        ],
        grid=(rows, tiles),
        grid_names=("row", "tile"),
        interpret=ip,
        compiler_params=_LANE,
    )
    lists = emit(s3, lengths, member_arg, params.astype(jnp.int32))
    lists = lists.reshape(rows, tiles, cap_rows * 128)

    # Slot s comes from the tile whose output range holds it.
    s = jnp.arange(k, dtype=jnp.int32)
    ends = offset + taken
    tile_of = jnp.sum(ends[:, :, None] <= s[None, None, :], axis=1)
    tile_of = jnp.minimum(tile_of, tiles - 1)
    local = s[None] - jnp.take_along_axis(offset, tile_of, axis=1)
    flat = tile_of * (cap_rows * 128) + jnp.clip(local, 0, cap_rows * 128 - 1)
    picked = jnp.take_along_axis(lists.reshape(rows, -1), flat, axis=1)
    return jnp.where(s[None] < total[:, None], picked, -1)


def _check(scores, group, what):
    _mgpu.require_float32(scores, what)
    n = scores.shape[1]
    if n % group or _mgpu.whole_tile(n // group) is None:
        raise NotImplementedError(f"{what} pallas: row length must be a multiple of {64 * group}")


def topk(scores, lengths, k, starts, candidates, block_size, *, interpret: bool = False):
    _mgpu.require_gpu("topk", interpret)
    if starts is not None:
        raise NotImplementedError("topk pallas: rows with starts (prefill) not supported")
    group = block_size if candidates is not None else 8
    _check(scores, group, "topk")
    rows, n = scores.shape
    member = None
    if candidates is not None:
        nb = n // group
        blk = jnp.where((candidates >= 0) & (candidates < nb), candidates, nb)
        member = (
            jnp.zeros((rows, nb), jnp.int32).at[jnp.arange(rows)[:, None], blk].set(1, mode="drop")
        )
    lengths = jnp.clip(_checks.int32(lengths), 0, n)
    return _select(
        scores,
        lengths,
        member,
        k=k,
        mode=POSITIONS,
        group=group,
        interpret=interpret,
    )


def select_candidate_blocks(
    block_scores, lengths, num_candidates, block_size, *, interpret: bool = False
):
    _mgpu.require_gpu("select_candidate_blocks", interpret)
    _check(block_scores, 8, "select_candidate_blocks")
    nb = block_scores.shape[1]
    lengths = jnp.clip(_checks.int32(lengths), 0, nb * block_size)
    nblocks = (lengths + block_size - 1) // block_size
    keys = _candidate_keys(block_scores, nblocks)
    return _select(keys, nblocks, None, k=num_candidates, mode=KEYS, group=8, interpret=interpret)
