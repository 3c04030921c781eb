"""The Pallas Mosaic GPU select: exact top-k of rows of any length, as SIMT programs
(`dsv41_jax._simt`) run by `plgpu.kernel`s of 1024 (or 512) threads.

One CTA selects from a chunk of up to 16 columns a thread (16,384) with every key in registers
and the row never read twice:

1. Scores become order-preserving unsigned keys (0 = never selected: past the length, outside
   the candidate blocks, NaN, -inf). Candidate-block selection keys the newest block highest
   and NaN / -inf blocks lowest-but-selectable.
2. Three digit passes (11, 11 and 10 bits) build shared-memory histograms with `red.shared.add`
   and find the k-th key's bin by a block scan; the search stops after a pass whose bin holds
   exactly the keys still needed.
3. The output in position order: per thread and tile the keys above the k-th and equal to it,
   scanned over the warp and the CTA; ties go to the lowest positions.

Candidate-block masks whose blocks fit one chunk (C·B <= 16,384 positions) are gathered: the
CTA marks the row's candidate blocks in a shared bitmap (ids in any order, repeated or out of
range), lists them in ascending order, and loads only their scores, so a masked row of any
length is one CTA.

Rows longer than a chunk take several launches: every chunk's own top-k (keys and positions,
in position order) and then the top-k of those candidates, until one chunk holds them. This is
exact: a key among a row's k best is among its chunk's k best, and candidates keep their
positions' order, so ties still go to the lowest position.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _simt
from dsv41_jax._pallas import plgpu, ref_types

PER = 16  # keys a thread holds
THREADS = 1024  # threads of a CTA (8 Mosaic GPU warpgroups); 512 where it pays (`stages`)
CHUNK = THREADS * PER  # columns one CTA of THREADS holds
SEGMENT = 32 * PER  # a warp's consecutive columns
MAX_K = CHUNK  # larger k: not taken (the padding loop is unrolled)
MAX_K_LONG = CHUNK // 4  # rows over several chunks: each stage must shrink the row
MAX_GATHER_BITS = 1 << 17  # blocks of a row a gathering CTA marks (a 16 KiB bitmap)

SOURCES = ("f32", "bf16", "blocks", "keys")
PINNED, LOWEST = 0xFFFFFFFF, 1  # candidate blocks: the newest, and NaN / -inf ones
# Shared memory, in 32-bit words.
HIST = 0  # three histograms of 2048 bins, one a pass (zeroed once)
SUMS = HIST + 3 * 2048  # per-warp sums of a digit scan
TOTALS = SUMS + 32  # per-warp counts of the output scan
BIN, ABOVE, IN_BIN = TOTALS + 32, TOTALS + 33, TOTALS + 34
BITS = TOTALS + 36  # candidate blocks, one bit a block (a chunk's; a gathered row's)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One launch: `source` rows of `width` columns, `chunks` CTAs of `threads` a row, the top
    `k` of each chunk. `out`: "positions" (int32 [rows, k], needs chunks == 1) or "candidates"
    (keys and positions [rows, chunks * k], the input of a "keys" launch). `members`: candidate
    block ids per row (0: no mask) of `block_size` positions, `gather`: read only those blocks;
    for "blocks", `block_size` turns lengths in positions into block counts."""

    source: str
    width: int
    k: int
    chunks: int = 1
    out: str = "positions"
    members: int = 0
    block_size: int = 8
    gather: bool = False
    threads: int = THREADS

    def __post_init__(self):
        assert self.source in SOURCES and self.out in ("positions", "candidates")
        assert self.threads in (512, 1024)
        assert self.out == "candidates" or self.chunks == 1
        assert 0 < self.width and 0 < self.k <= MAX_K
        assert self.gather or self.width <= self.chunks * self.chunk
        assert not (self.members and self.source not in ("f32", "bf16"))
        assert self.source != "bf16" or self.width % 8 == 0
        if self.gather:  # bf16 words hold two scores: its loads must stay inside a block
            assert self.members and self.chunks == 1 and self.gathered <= self.chunk
            assert self.source != "bf16" or self.block_size % 8 == 0
            assert self.row_blocks <= MAX_GATHER_BITS

    @property
    def chunk(self) -> int:
        return self.threads * PER

    @property
    def gathered(self) -> int:
        """Columns of a gathered row: every candidate block's positions."""
        return self.members * self.block_size

    @property
    def row_blocks(self) -> int:
        return -(-self.width // self.block_size)

    @property
    def vec(self) -> int:
        """Columns a thread loads at once: one 16-byte load where rows stay aligned (and, when
        gathering, where a load stays inside one block)."""
        v = 8 if self.source == "bf16" else 4
        if self.gather and self.block_size % v:
            return 1
        return v if self.width % v == 0 else 1

    @property
    def words(self) -> int:
        """32-bit words a row of the source occupies."""
        return self.width // 2 if self.source == "bf16" else self.width

    @property
    def bitmap_words(self) -> int:
        if not self.members:
            return 0
        bits = self.row_blocks if self.gather else (self.chunk - 1) // self.block_size + 2
        return -(-bits // 32)

    @property
    def smem_words(self) -> int:
        return BITS + self.bitmap_words + (self.members if self.gather else 0)

    @property
    def inputs(self) -> tuple[str, ...]:
        extra = {"keys": ("positions",), "blocks": ("lengths",)}.get(self.source, ("lengths",))
        return ("data", *extra, *(("members",) if self.members else ()))

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("out",) if self.out == "positions" else ("okeys", "opos")


def _warp_scan(b, x, lane):
    """Inclusive sum over the lanes of each warp."""
    for d in (1, 2, 4, 8, 16):
        x = b.sel(b.ge(lane, d), b.add(x, b.shfl_up(x, d)), x)
    return x


def _warp_sums(b, sums, lane, warps: int):
    """Lane l of every warp: the word warp l left in `sums` (0 past the CTA's warps)."""
    if warps == 32:
        return b.lds(b.add(sums, lane))
    return b.sel(b.lt(lane, warps), b.lds(b.add(sums, b.minu(lane, warps - 1))), 0)


def _cta_scan(b, x, lane, warp, sums, warps: int):
    """Exclusive sum of `x` over the CTA's threads, and the CTA's total (one barrier; `sums`
    holds a word a warp, read by every warp)."""
    inc = _warp_scan(b, x, lane)
    b.sts(b.add(sums, warp), inc, b.eq(lane, 31))
    b.barrier()
    w = _warp_sums(b, sums, lane, warps)
    winc = _warp_scan(b, w, lane)
    before = b.shfl_idx(b.sub(winc, w), warp)
    return b.add(before, b.sub(inc, x)), b.shfl_idx(winc, 31)


def _digit_pass(b, keys, t, lane, warp, p: int, prefix, k_rem, threads: int):
    """Pass `p` over the keys whose bits above the digit equal `prefix`: the digit holding the
    `k_rem`-th largest of them, the keys above its bin and in it, and how many took part."""
    shift, width = ((21, 11), (10, 11), (0, 10))[p]
    digits, hist = 1 << width, HIST + 2048 * p
    for key in keys:
        take = b.ne(key, 0)
        if p:
            take = b.pand(take, b.eq(b.shr(key, shift + width), prefix))
        b.red_add(b.add(b.and_(b.shr(key, shift), digits - 1), hist), 1, take)
    b.barrier()
    per = digits // threads  # thread t holds digits digits-1-per*t-j, descending
    first = b.sub(digits - 1, b.mul(t, per))
    counts = [b.lds(b.add(b.sub(first, j), hist)) for j in range(per)]
    mine = counts[0]
    for cnt in counts[1:]:
        mine = b.add(mine, cnt)
    above, total = _cta_scan(b, mine, lane, warp, SUMS, threads // 32)
    for j, cnt in enumerate(counts):
        hit = b.pand(b.lt(above, k_rem), b.le(k_rem, b.add(above, cnt)))
        b.sts(BIN, b.sub(first, j), hit)
        b.sts(ABOVE, above, hit)
        b.sts(IN_BIN, cnt, hit)
        above = b.add(above, cnt)
    b.barrier()
    return b.lds(BIN), b.lds(ABOVE), b.lds(IN_BIN), total


def _below(b, lo):
    """The largest key under a bin that starts at `lo` (0 when lo is 0: key 0 is never taken)."""
    return b.sel(b.eq(lo, 0), 0, b.sub(lo, 1))


def _search(b, keys, t, lane, warp, k: int, threads: int):
    """The k-th key: the keys above `thresh` are taken and the first `need` equal to it. Also
    the number of keys that may be selected."""
    step = functools.partial(_digit_pass, b, keys, t, lane, warp, threads=threads)
    bin0, above0, in0, total = step(0, None, b.c(k))

    def refine():
        k1 = b.sub(k, above0)

        def after0():
            bin1, above1, in1, _ = step(1, bin0, k1)
            prefix1 = b.or_(b.shl(bin0, 11), bin1)
            k2 = b.sub(k1, above1)

            def after1():
                bin2, above2, _, _ = step(2, prefix1, k2)
                return [b.or_(b.shl(prefix1, 10), bin2), b.sub(k2, above2)]

            return b.if_(b.eq(in1, k2), lambda: [_below(b, b.shl(prefix1, 10)), 0], after1, 2)

        return b.if_(b.eq(in0, k1), lambda: [_below(b, b.shl(bin0, 21)), 0], after0, 2)

    thresh, need = b.if_(b.gt(total, k), refine, lambda: [0, 0], 2)
    return thresh, need, total


def _to_key(b, bits):
    """Order-preserving unsigned key of float32 bits (-0 ties +0)."""
    bits = b.sel(b.eq(bits, 0x80000000), 0, bits)
    return b.xor(bits, b.sel(b.ge(bits, 0x80000000), 0xFFFFFFFF, 0x80000000))


def _unscored(b, bits):
    """NaN or -inf."""
    return b.por(b.gt(b.and_(bits, 0x7FFFFFFF), 0x7F800000), b.eq(bits, 0xFF800000))


def _divide(b, x, n: int):
    return b.shr(x, n.bit_length() - 1) if n & (n - 1) == 0 else b.divu(x, n)


def _length(b, s: Spec, row):
    """The row's selectable columns: its length clamped to the row (blocks: in blocks)."""
    if s.source == "keys":
        return b.c(s.width)
    given = b.ldg("lengths", row)
    given = b.sel(b.ge(given, 0x80000000), 0, given)  # negative: 0
    if s.source == "blocks":  # positions -> blocks (no wrap: given < 2^31)
        given = _divide(b, b.add(given, s.block_size - 1), s.block_size)
    return b.minu(given, s.width)


def _mark(b, s: Spec, t, row, first_block, limit):
    """Set the bit of every candidate id in [first_block, first_block + limit) (ids in any
    order, repeated, negative or past the row: only membership counts)."""
    for i in range(-(-s.members // s.threads)):
        at = b.add(t, s.threads * i)
        ids = b.ldg("members", b.add(b.mul(row, s.members), b.minu(at, s.members - 1)))
        rel = b.sub(ids, first_block)  # ids below the range (and negative ones) wrap high
        ok = b.pand(b.lt(at, s.members), b.lt(rel, limit))
        b.red_or(b.add(b.shr(rel, 5), BITS), b.shlv(1, b.and_(rel, 31)), ok)


def _list_blocks(b, s: Spec, t, lane, warp):
    """The marked blocks of a gathering CTA's bitmap, ascending, into shared memory after the
    bitmap; returns how many."""
    listed = BITS + s.bitmap_words
    per = -(-s.bitmap_words // s.threads)  # thread t owns words per*t ... per*t + per - 1
    first = b.mul(t, per)
    words = []
    for i in range(per):
        at = b.add(first, i)
        inside = b.lt(at, s.bitmap_words)
        words.append(b.sel(inside, b.lds(b.add(b.minu(at, s.bitmap_words - 1), BITS)), 0))
    count = b.popc(words[0])
    for w in words[1:]:
        count = b.add(count, b.popc(w))
    slot, total = _cta_scan(b, count, lane, warp, SUMS, s.threads // 32)
    for i, w in enumerate(words):
        block = b.mul(b.add(first, i), 32)
        for bit in range(32):
            on = b.ne(b.and_(w, 1 << bit), 0)
            b.sts(b.add(slot, listed), b.add(block, bit), on)
            slot = b.add(slot, b.sel(on, 1, 0))
    return total


def program(b, s: Spec) -> None:
    """The select of one chunk a CTA (see the module docstring), on backend `b`."""
    t = b.tid()
    lane, warp = b.and_(t, 31), b.shr(t, 5)
    cta = b.cta()
    if s.chunks == 1:
        row, lo = cta, b.c(0)
    else:
        row, lo = b.divu(cta, s.chunks), b.mul(b.remu(cta, s.chunks), s.chunk)
    vec, tiles, n = s.vec, PER // s.vec, s.width
    first = b.add(lo, b.add(b.mul(warp, SEGMENT), b.mul(lane, vec)))
    cols = [b.add(first, 32 * vec * j) for j in range(tiles)]  # each tile's first column
    row_words = b.mul(row, s.words)

    def load(col):
        """The scores of columns col ... col + vec - 1: clamped into the row (what lies past
        it is masked later), whole 16-byte vectors where the rows are aligned."""
        if vec == 1:
            return [b.ldg("data", b.add(row_words, b.minu(col, n - 1)))]
        at = b.minu(col, n - vec)
        return b.ldg4("data", b.add(row_words, b.shr(at, 1) if vec == 8 else at))

    raw: list[list[Any]] = [] if s.gather else [load(col) for col in cols]  # issued first
    length = _length(b, s, row)

    for i in range(-(-3 * 2048 // s.threads)):  # the three histograms start at zero
        b.sts(b.add(t, HIST + s.threads * i), 0)
    for word in (BIN, ABOVE, IN_BIN):  # read even when no bin holds the k-th key (total <= k)
        b.sts(word, 0, b.eq(t, 0))
    member = None
    if s.members:  # the bitmap starts at zero, and so does a gathering CTA's block list
        zeroed = s.bitmap_words + (s.members if s.gather else 0)
        for i in range(-(-zeroed // s.threads)):
            at = b.add(t, s.threads * i)
            b.sts(b.add(at, BITS), 0, b.lt(at, zeroed))
        b.barrier()
    if s.gather:
        # Blocks past the length hold nothing selectable: not listed.
        blocks = _divide(b, b.add(length, s.block_size - 1), s.block_size)
        _mark(b, s, t, row, b.c(0), blocks)
        b.barrier()
        listed = _list_blocks(b, s, t, lane, warp)
        b.barrier()
        positions = []  # each tile's first position; its columns are in one block
        for col in cols:
            slot = _divide(b, col, s.block_size)
            block = b.lds(b.add(b.minu(slot, s.members - 1), BITS + s.bitmap_words))
            pos = b.add(b.mul(block, s.block_size), b.sub(col, b.mul(slot, s.block_size)))
            positions.append(b.sel(b.lt(slot, listed), pos, 0xFFFFFFFF))
            raw.append(load(positions[-1]))
    elif s.members:
        block0 = _divide(b, lo, s.block_size)
        _mark(b, s, t, row, block0, 32 * s.bitmap_words)

        def member(col):
            rel = b.sub(_divide(b, col, s.block_size), block0)
            word = b.lds(b.add(b.shr(rel, 5), BITS))
            return b.ne(b.and_(b.shrv(word, b.and_(rel, 31)), 1), 0)

        b.barrier()
    else:
        b.barrier()

    keys, columns = [], []
    for j, words in enumerate(raw):
        for e in range(vec):
            col = b.add(positions[j], e) if s.gather else b.add(cols[j], e)
            columns.append(col)
            if s.source == "bf16":
                w = words[e // 2]
                bits = b.shl(w, 16) if e % 2 == 0 else b.and_(w, 0xFFFF0000)
            else:
                bits = words[e]
            inside = b.lt(col, length)
            if s.gather:  # an unlisted slot's position is 2^32 - 1 (its columns wrap)
                inside = b.pand(inside, b.ne(positions[j], 0xFFFFFFFF))
            if s.source == "keys":
                keys.append(b.sel(inside, bits, 0))
            elif s.source == "blocks":
                key = b.sel(_unscored(b, bits), LOWEST, _to_key(b, bits))
                key = b.sel(b.eq(col, b.sub(length, 1)), PINNED, key)
                keys.append(b.sel(inside, key, 0))
            else:
                ok = b.pand(inside, b.pnot(_unscored(b, bits)))
                if member is not None:
                    ok = b.pand(ok, member(col))
                keys.append(b.sel(ok, _to_key(b, bits), 0))

    thresh, need, total = _search(b, keys, t, lane, warp, s.k, s.threads)
    _emit(b, s, keys, columns, t, lane, warp, row, cta, thresh, need, total)


def _emit(b, s: Spec, keys, positions, t, lane, warp, row, cta, thresh, need, total):
    """Every taken key to its output slot, in position order; then the padding."""
    vec, tiles = s.vec, PER // s.vec
    tie = b.ne(need, 0)
    above = [b.gt(key, thresh) for key in keys]
    equal = [b.pand(tie, b.eq(key, thresh)) for key in keys]
    before, tile_counts, warp_total = [], [], b.c(0)
    for j in range(tiles):  # keys above | equal << 16 per tile (a chunk's counts < 2^16)
        count = b.c(0)
        for i in range(j * vec, (j + 1) * vec):
            count = b.add(count, b.sel(above[i], 1, b.sel(equal[i], 1 << 16, 0)))
        inc = _warp_scan(b, count, lane)
        before.append(b.sub(inc, count))
        tile_counts.append(b.shfl_idx(inc, 31))
        warp_total = b.add(warp_total, tile_counts[-1])
    b.sts(b.add(TOTALS, warp), warp_total, b.eq(lane, 0))
    b.barrier()
    w = _warp_sums(b, TOTALS, lane, s.threads // 32)
    winc = _warp_scan(b, w, lane)
    base = b.shfl_idx(b.sub(winc, w), warp)
    above_base, equal_base = b.and_(base, 0xFFFF), b.shr(base, 16)
    out = b.mul(row, s.k) if s.out == "positions" else b.mul(cta, s.k)
    mapped = b.mul(row, s.width)  # "keys": the row's positions
    for j in range(tiles):
        g = b.add(above_base, b.and_(before[j], 0xFFFF))
        e = b.add(equal_base, b.shr(before[j], 16))
        for i in range(j * vec, (j + 1) * vec):
            key, col = keys[i], positions[i]
            take = b.por(above[i], b.pand(equal[i], b.lt(e, need)))
            slot = b.add(out, b.add(g, b.minu(e, need)))
            if s.source == "keys":
                col = b.ldg_if("positions", b.add(mapped, col), take)
            if s.out == "positions":
                b.stg("out", slot, col, take)
            else:
                b.stg("okeys", slot, key, take)
                b.stg("opos", slot, col, take)
            g = b.add(g, b.sel(above[i], 1, 0))
            e = b.add(e, b.sel(equal[i], 1, 0))
        above_base = b.add(above_base, b.and_(tile_counts[j], 0xFFFF))
        equal_base = b.add(equal_base, b.shr(tile_counts[j], 16))
    taken = b.minu(total, s.k)
    for i in range(-(-s.k // s.threads)):
        at = b.add(t, s.threads * i)
        pad = b.pand(b.lt(at, s.k), b.ge(at, taken))
        if s.out == "positions":
            b.stg("out", b.add(out, at), 0xFFFFFFFF, pad)
        else:
            b.stg("okeys", b.add(out, at), 0, pad)
            b.stg("opos", b.add(out, at), 0xFFFFFFFF, pad)


# ------------------------------------------------------------------------------ launches
def stages(width: int, k: int, threads: int = THREADS) -> list[int]:
    """CTAs a row of each launch: chunks of candidates while the row is over one chunk (the
    first launch's CTAs of `threads`, the later ones' of THREADS)."""
    out, chunk = [], threads * PER
    while width > chunk:
        chunks = -(-width // chunk)
        out.append(chunks)
        width, chunk = chunks * k, CHUNK
    return [*out, 1]


def first_threads(rows: int, width: int, k: int, sms: int) -> int:
    """CTA size of the first launch: 512 threads (chunks of 8,192) where a row over several
    chunks then fits one wave of CTAs and its candidates one chunk (the first launch's CTAs
    finish sooner: faster at [8, 128K] on the H200, BENCHMARKS_HISTORY.md), else 1024."""
    chunks = -(-width // (512 * PER))
    if width > CHUNK and rows * chunks <= sms and chunks * k <= CHUNK:
        return 512
    return THREADS


def gathers(width: int, members: int, block_size: int) -> bool:
    """Whether a masked row is gathered (one CTA reads only its candidate blocks)."""
    return members * block_size <= CHUNK and -(-width // block_size) <= MAX_GATHER_BITS


def _out_types(s: Spec, rows: int):
    if s.out == "positions":
        return [jax.ShapeDtypeStruct((rows, s.k), jnp.int32)]
    shape = (rows, s.chunks * s.k)
    return [jax.ShapeDtypeStruct(shape, jnp.uint32), jax.ShapeDtypeStruct(shape, jnp.int32)]


@functools.cache
def _kernel(s: Spec, rows: int):
    from dsv41_jax import _simt_mlir

    names = (*s.inputs, *s.outputs)

    def body(*refs):
        def emit(ctx, *r):
            del ctx
            *gmem, smem = r
            program(_simt_mlir.Mlir(dict(zip(names, gmem)), smem), s)

        plgpu.inline_mgpu(arg_types=ref_types(len(s.inputs), len(refs)))(emit)(*refs)

    return plgpu.kernel(
        body,
        out_type=_out_types(s, rows),
        scratch_types=[plgpu.SMEM((s.smem_words,), jnp.int32)],
        grid=(rows * s.chunks,),
        grid_names=("cta",),
        num_threads=s.threads // 128,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane),
    )


def launch(s: Spec, *arrays):
    """Run one launch on the GPU: `arrays` in the order of `s.inputs`."""
    rows = arrays[0].shape[0]
    return tuple(_kernel(s, rows)(*arrays))


def emulate(s: Spec, *arrays, seed: int = 0):
    """Run one launch on the CPU emulator (numpy arrays in, numpy arrays out), with its checks:
    bounds, uninitialised shared memory, races, and every output word stored exactly once."""
    rows = arrays[0].shape[0]
    outs = [np.full(o.shape, 0x7EADBEEF, np.uint32).view(o.dtype) for o in _out_types(s, rows)]
    buffers = {n: np.ascontiguousarray(a).reshape(-1) for n, a in zip(s.inputs, arrays)}
    buffers.update({n: o.reshape(-1) for n, o in zip(s.outputs, outs)})
    emu = _simt.Emulator(rows * s.chunks, s.threads, s.smem_words, buffers, seed=seed)
    program(emu, s)
    for name in s.outputs:
        counts = emu.stores.get(name, np.zeros(0, np.int64))
        if counts.size != buffers[name].size or (counts != 1).any():
            raise _simt.EmulationError(f"{name}: not every word stored exactly once")
    return tuple(outs)


def select(
    run,
    source: str,
    data,
    lengths,
    k: int,
    *,
    members=None,
    block_size: int = 8,
    threads: int = THREADS,
):
    """Top-k of each row through launches of `run` (`launch` or `emulate`): int32 [rows, k]
    ascending, -1 padded. `data` [rows, N] float32 / bfloat16 scores or float32 block scores
    (`source` "f32" / "bf16" / "blocks"); `members` int32 [rows, C] candidate block ids;
    `threads`: CTA size of the first launch of a row over several chunks."""
    n = data.shape[1]
    c = 0 if members is None else members.shape[1]
    if c and gathers(n, c, block_size):
        spec = Spec(source, n, k, members=c, block_size=block_size, gather=True)
        return run(spec, data, lengths, members)[0]
    plan = stages(n, k, threads)
    width, keys, positions = n, None, None
    for i, chunks in enumerate(plan):
        last = i == len(plan) - 1
        spec = Spec(
            source if i == 0 else "keys",
            width,
            k,
            chunks=chunks,
            out="positions" if last else "candidates",
            members=c if i == 0 else 0,
            block_size=block_size,
            threads=threads if i == 0 and not last else THREADS,
        )
        if i == 0:
            args = [data, lengths] + ([members] if c else [])
        else:
            args = [keys, positions]
        res = run(spec, *args)
        if last:
            return res[0]
        keys, positions = res
        width = chunks * k
    raise AssertionError("unreachable")
