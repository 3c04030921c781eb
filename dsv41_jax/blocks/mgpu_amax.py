"""block_amax as a SIMT program (`dsv41_jax._simt`) in a `plgpu.kernel` of 1024 threads: each
thread takes one block of a row (a warp's loads are contiguous), issues its 16-byte loads
first, and keeps the max of the block's visible scores with the NaN-ignoring `max.f32`:
positions at or past the row's length read as -inf, and the newest block is pinned to +inf.
A block a thread measured fastest at every size on the H200 (two or four a thread, with more
loads in flight each, were slower or equal: BENCHMARKS_HISTORY.md)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _simt
from dsv41_jax._pallas import plgpu, ref_types

THREADS = 1024
NEG_INF, POS_INF = 0xFF800000, 0x7F800000  # float32 bits


@dataclasses.dataclass(frozen=True)
class AmaxSpec:
    """Rows of `width` float32 scores, blocks of `block_size` (newest pinned with `pin`), `per`
    blocks a thread."""

    width: int
    block_size: int
    pin: bool
    per: int = 1

    @property
    def vec(self) -> int:
        return 4 if self.width % 4 == 0 and self.block_size % 4 == 0 else 1

    @property
    def row_blocks(self) -> int:
        return -(-self.width // self.block_size)

    @property
    def ctas_per_row(self) -> int:
        return -(-self.row_blocks // (THREADS * self.per))


def program(b, s: AmaxSpec) -> None:
    t, cta, n, vec = b.tid(), b.cta(), s.width, s.vec
    row, tile = b.divu(cta, s.ctas_per_row), b.remu(cta, s.ctas_per_row)
    first = b.add(b.mul(tile, THREADS * s.per), t)
    blocks = [b.add(first, THREADS * i) for i in range(s.per)]
    row_words = b.mul(row, n)
    raw = []
    for block in blocks:  # loads first, clamped into the row (masked below)
        words: list[Any] = []
        for v in range(s.block_size // vec):
            at = b.minu(b.add(b.mul(block, s.block_size), v * vec), n - vec)
            at = b.add(row_words, at)
            words += b.ldg4("data", at) if vec == 4 else [b.ldg("data", at)]
        raw.append(words)
    given = b.ldg("lengths", row)
    length = b.sel(b.ge(given, 0x80000000), 0, b.minu(given, n))  # negative: 0
    newest = b.sub(b.divu(b.add(length, s.block_size - 1), s.block_size), 1)
    for block, words in zip(blocks, raw):
        m = b.c(NEG_INF)
        for e, bits in enumerate(words):
            visible = b.lt(b.add(b.mul(block, s.block_size), e), length)
            m = b.fmax(m, b.sel(visible, bits, NEG_INF))
        if s.pin:
            m = b.sel(b.eq(block, newest), POS_INF, m)
        at = b.add(b.mul(row, s.row_blocks), block)
        b.stg("out", at, m, b.lt(block, s.row_blocks))


@functools.cache
def _kernel(s: AmaxSpec, rows: int):
    from dsv41_jax import _simt_mlir

    def body(*refs):
        def emit(ctx, data, lengths, out, smem):
            del ctx
            refs = {"data": data, "lengths": lengths, "out": out}
            program(_simt_mlir.Mlir(refs, smem), s)

        plgpu.inline_mgpu(arg_types=ref_types(2, len(refs)))(emit)(*refs)  # data, lengths: inputs

    return plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct((rows, s.row_blocks), jnp.float32),
        scratch_types=[plgpu.SMEM((1,), jnp.int32)],
        grid=(rows * s.ctas_per_row,),
        grid_names=("cta",),
        num_threads=THREADS // 128,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane),
    )


def launch(s: AmaxSpec, scores, lengths):
    return _kernel(s, scores.shape[0])(scores, lengths)


def emulate(s: AmaxSpec, scores, lengths):
    rows = scores.shape[0]
    out = np.full((rows, s.row_blocks), np.nan, np.float32)
    buffers = {
        "data": np.ascontiguousarray(scores, np.float32).reshape(-1),
        "lengths": np.ascontiguousarray(lengths, np.int32).reshape(-1),
        "out": out.reshape(-1),
    }
    emu = _simt.Emulator(rows * s.ctas_per_row, THREADS, 1, buffers)
    program(emu, s)
    counts = emu.stores.get("out", np.zeros(0, np.int64))
    if counts.size != out.size or (counts != 1).any():
        raise _simt.EmulationError("out: not every word stored exactly once")
    return out
