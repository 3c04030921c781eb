"""Device-time benchmarks: `python -m dsv41_jax.bench [--quick] [--out FILE]`.

Runs on a GPU machine. Time is GPU kernel time read from CUPTI (through torch.profiler, which
records every kernel of the process, JAX's included): the sum of kernel durations inside the
timed window divided by the calls in it, median of repeats. Host dispatch is never timed. Inputs
rotate over several sets so repeated calls do not hit a warm cache. Every row stands beside its
floor: the bytes it must move over the copy bandwidth measured in the same run. The selection
rows are checked before they are timed: top-k, masked top-k and candidate selection (each
implementation and each CUDA select forced) against the reference, a consumer layer's and the
step's variants against the mask path's selections; a row whose result differs raises
WrongResult and is never timed.

A run's table (`--out`) goes into BENCHMARKS_HISTORY.md as a new section, and BENCHMARKS.md is
generated from that file (`python -m dsv41_jax.bench_report`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import itertools
import json
import os
import re
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import bench_report, testing

BREAKDOWN: list[str] = []  # filled when --breakdown: the kernels behind each timed row


def kernel_time_us(run: Callable[[int], object], calls: int = 20, repeats: int = 5) -> float:
    """Median over repeats of GPU kernel time per call of `run(i)` (i = call index)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for i in range(3):
        _block(run(i))
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            outs = [run(i) for i in range(calls)]
            _block(outs)
            torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            events = json.load(open(f.name))["traceEvents"]
        device = [
            e
            for e in events
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        ]
        # Busy time of the busiest GPU (one GPU: its kernel time; several: the slowest one).
        busy: dict[object, float] = {}
        for e in device:
            dev = e.get("args", {}).get("device", 0)
            busy[dev] = busy.get(dev, 0.0) + e.get("dur", 0)
        per_call.append(max(busy.values(), default=0.0) / calls)
    if os.environ.get("DSV41_BENCH_BREAKDOWN"):
        by_name: dict[str, float] = {}
        for e in device:
            name = e.get("name", "?")[:90]
            by_name[name] = by_name.get(name, 0.0) + e["dur"]
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:4]
        BREAKDOWN.append("; ".join(f"{n}: {d / calls:.1f}" for n, d in top))
    return statistics.median(per_call)


def _block(x):
    try:
        import torch

        if isinstance(x, torch.Tensor) or (
            isinstance(x, list) and x and isinstance(x[0], torch.Tensor)
        ):
            return x
    except ImportError:
        pass
    return jax.block_until_ready(x)


class WrongResult(AssertionError):
    """A benchmarked call returned something else than what it is checked against: its row is
    not timed."""


def check_result(got: object, want: object, what: str) -> None:
    """Raise WrongResult unless the pytrees `got` and `want` hold equal arrays (selections are
    exact, so equal means bitwise)."""
    g, w = jax.tree.leaves(got), jax.tree.leaves(want)
    if len(g) != len(w) or not all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(g, w)
    ):
        raise WrongResult(f"{what}: the result differs from what it is checked against")


def jax_time_us(
    fn: Callable,
    arg_sets: Sequence[tuple],
    calls: int = 20,
    want: object = None,
    what: str = "",
    pick: Callable[[object], object] = lambda result: result,
) -> float:
    """Kernel time per call of jit(fn) over `arg_sets`; with `want` (what `pick` of its result
    on `arg_sets[0]` must be, e.g. the reference's), the result is checked first
    (WrongResult)."""
    f = jax.jit(fn)
    if want is not None:
        check_result(pick(f(*arg_sets[0])), want, what)
    return kernel_time_us(lambda i: f(*arg_sets[i % len(arg_sets)]), calls)


def copy_bandwidth_gbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), measured now."""
    x = jnp.ones(nbytes // 8, jnp.float32)  # read nbytes/2, write nbytes/2
    t = jax_time_us(lambda a: a + 1.0, [(x,)], calls=10)
    return nbytes / (t * 1e-6) / 1e9


@dataclass
class Row:
    op: str
    shape: str
    impl: str
    us: float
    floor_us: float

    def __post_init__(self) -> None:  # one progress line per measured row
        print(f"bench: {self.op} | {self.shape} | {self.impl}: {self.us:.1f} us", flush=True)

    def md(self) -> str:
        ratio = f"{self.us / self.floor_us:.1f}x" if self.floor_us else "–"
        floor = f"{self.floor_us:.1f}" if self.floor_us else "–"
        cells = (self.op, self.shape, self.impl, f"{self.us:.1f}", floor)
        return "| " + " | ".join(cells) + f" | {ratio} |"


def bench_logits(rng, bw, quick: bool) -> list[Row]:
    import dsv41_jax as dj

    rows = []
    for bs in (1, 8, 64):
        for ctx in (16384, 131072):
            pages = ctx // 64
            sets = []
            for _ in range(2):
                cache = dj.PagedIndexCache(
                    jnp.asarray(rng.integers(0, 120, (bs * pages, 64, 1, 132), dtype=np.uint8))
                )
                bt = jnp.asarray(rng.permutation(bs * pages).astype(np.int32).reshape(bs, pages))
                q = testing.query(rng, bs, 1, 32, 128)
                sets.append((q, cache, jnp.full((bs,), ctx, jnp.int32), bt))
            floor = bs * ctx * 132 / (bw * 1e3)
            t = jax_time_us(lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"), sets)
            rows.append(
                Row("paged_mqa_logits", f"bs{bs} x {ctx // 1024}K", "ffi (DeepGEMM sm90)", t, floor)
            )
            if not quick and bs * ctx <= 8 * 131072:
                t = jax_time_us(
                    lambda *a: dj.paged_mqa_logits(*a, implementation="reference"), sets, calls=3
                )
                rows.append(
                    Row("paged_mqa_logits", f"bs{bs} x {ctx // 1024}K", "reference (XLA)", t, floor)
                )
    return rows


FP8_DENSE_TFLOPS = 989.0  # H100/H200 SXM dense FP8 tensor-core peak (the prefill logits floor)
PREFILL_TOKENS = (4096, 32768, 131072)
PREFILL_CHUNK = 32768  # query rows per call: [rows, T] fp32 logits, 16 GiB at T = 128K


def bench_prefill(rng, bw, quick: bool) -> list[Row]:
    """Ragged prefill of one causal request of T tokens (row i sees keys [0, i + 1)), 32 heads,
    in chunks of at most 32K query rows (chunked prefill; the sum over chunks is reported): the
    logits (floor: the causal FLOPs at the FP8 peak), the top-k over them (floor: the visible
    logits read once) and the whole publish_prefill. The reference logits only at 4K."""
    import dsv41_jax as dj
    from dsv41_jax.topk import ffi as topk_ffi

    cfg = dj.IndexerConfig()
    rows = []
    for t in PREFILL_TOKENS[:1] if quick else PREFILL_TOKENS:
        keys = dj.quantize_keys(testing.normal(rng, (t, 128)))
        shape = f"{t // 1024}K tokens, H 32" + (
            f", {PREFILL_CHUNK // 1024}K-row chunks" if t > PREFILL_CHUNK else ""
        )
        total = {"logits": 0.0, "topk": 0.0, "filter": 0.0, "publish": 0.0, "reference": 0.0}
        f = jax.jit(lambda q, k, s, e: dj.mqa_logits(q, k, s, e, relative=True))
        for r0 in range(0, t, PREFILL_CHUNK):
            n = min(PREFILL_CHUNK, t - r0)
            q = testing.query(rng, n, 1, 32, 128)
            starts = jnp.zeros((n,), jnp.int32)
            ends = jnp.arange(r0 + 1, r0 + n + 1, dtype=jnp.int32)
            args = (q, keys, starts, ends)
            total["logits"] += jax_time_us(f, [args], calls=1)
            if t <= 4096 and not quick:
                total["reference"] += jax_time_us(
                    lambda *a: dj.mqa_logits(*a, relative=True, implementation="reference"),
                    [args],
                    calls=1,
                )
            logits = f(*args)
            total["topk"] += jax_time_us(
                lambda x, m: dj.topk(x, m, cfg.index_topk), [(logits, ends)], calls=1
            )
            # The filter-first select forced (the dispatch takes the short-row select for rows
            # of at most 128K keys).
            total["filter"] += jax_time_us(
                lambda x, m: topk_ffi.cuda_topk(
                    x, m, cfg.index_topk, None, None, 8, "positions", "filter"
                ),
                [(logits, ends)],
                calls=1,
            )
            del logits
            total["publish"] += jax_time_us(lambda *a: dj.publish_prefill(*a, cfg), [args], calls=1)
        floor = 2.0 * 32 * 128 * t * (t + 1) / 2 / (FP8_DENSE_TFLOPS * 1e6)
        top_floor = 4.0 * t * (t + 1) / 2 / (bw * 1e3)
        rows.append(
            Row("mqa_logits (prefill)", shape, "ffi (DeepGEMM sm90)", total["logits"], floor)
        )
        if total["reference"]:
            rows.append(
                Row("mqa_logits (prefill)", shape, "reference (XLA)", total["reference"], floor)
            )
        rows.append(Row("topk k=512 (prefill rows)", shape, "default", total["topk"], top_floor))
        rows.append(
            Row("topk k=512 (prefill rows)", shape, "ffi filter", total["filter"], top_floor)
        )
        rows.append(Row("publish_prefill", shape, "default", total["publish"], floor + top_floor))
    return rows


def bench_sort(rng, bw) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    for bs in (8, 64):
        c, pages = 2048, 2048  # 128K positions = 16384 blocks
        sets = []
        for _ in range(4):
            sel = np.stack([rng.choice(16384, c, replace=False) for _ in range(bs)]).astype(
                np.int32
            )
            sets.append(
                (
                    jnp.asarray(sel),
                    jnp.full((bs,), 131072, jnp.int32),
                    jnp.asarray(rng.integers(0, 1 << 20, (bs, pages), dtype=np.int32)),
                )
            )
        floor = bs * c * 4 * 3 / (bw * 1e3)  # read ids, write blocks + physical
        for impl in ("ffi", "reference"):
            t = jax_time_us(
                lambda *a, impl=impl: dj.sort_candidate_blocks(*a, implementation=impl), sets
            )
            rows.append(Row("sort_candidate_blocks", f"[{bs}, {c}]", impl, t, floor))
        tsel = [torch.from_numpy(np.asarray(s[0])).cuda() for s in sets]
        t = kernel_time_us(lambda i: torch.sort(tsel[i % 4], dim=1).values)
        rows.append(Row("sort_candidate_blocks", f"[{bs}, {c}]", "torch.sort (baseline)", t, floor))
    return rows


def bench_block_amax(rng, bw) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    for bs, n in ((8, 131072), (64, 131072), (64, 1 << 20)):
        sets = [(testing.normal(rng, (bs, n)), jnp.full((bs,), n - 5, jnp.int32)) for _ in range(2)]
        floor = bs * n * 4 * (1 + 1 / 8) / (bw * 1e3)
        want = jax.jit(lambda s, l: dj.block_amax(s, l, implementation="reference"))(*sets[0])
        for impl in ("pallas", "reference"):
            t = jax_time_us(
                lambda s, l, impl=impl: dj.block_amax(s, l, implementation=impl),
                sets,
                want=want,
                what=f"block_amax [{bs}, {n // 1024}K] {impl}",
            )
            rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", impl, t, floor))
        ts = [torch.from_numpy(np.asarray(s[0])).cuda() for s in sets]
        t = kernel_time_us(lambda i: ts[i % 2].view(bs, -1, 8).amax(-1))
        rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", "torch amax (baseline)", t, floor))
    return rows


DEFAULT = "auto (default)"  # the row of `implementation=None`: what the dispatch picks


def bench_topk(rng, bw, impls: Sequence[str]) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    cases = [
        ("topk k=512", 1, 16384, 512),
        ("topk k=512", 8, 16384, 512),
        ("topk k=512", 8, 131072, 512),
        ("topk k=2048", 8, 131072, 2048),
        ("topk k=512", 64, 131072, 512),
        ("topk k=512", 8, 1 << 20, 512),
        ("topk k=512", 64, 1 << 20, 512),
        ("candidate top-2048", 8, 16384, 2048),
        ("candidate top-2048", 64, 16384, 2048),
    ]
    for op, bs, n, k in cases:
        candidate = op.startswith("candidate")
        length = n * 8 - 3 if candidate else n - 3  # candidate rows: lengths in positions
        sets = [
            (testing.normal(rng, (bs, n)), jnp.full((bs,), length, jnp.int32)) for _ in range(3)
        ]
        floor = bs * n * 4 / (bw * 1e3)
        shape = f"[{bs}, {n // 1024}K]"

        def fn(s, lens, impl):
            if candidate:
                return dj.select_candidate_blocks(s, lens, num_candidates=k, implementation=impl)
            return dj.topk(s, lens, k, implementation=impl)

        want = jax.jit(functools.partial(fn, impl="reference"))(*sets[0])
        for impl in (*impls, None, "reference"):  # None: the dispatch's pick
            t = jax_time_us(
                functools.partial(fn, impl=impl), sets, want=want, what=f"{op} {shape} {impl}"
            )
            rows.append(Row(op, shape, impl or DEFAULT, t, floor))
        if "ffi" in impls:  # each CUDA select forced, beside the dispatch's pick of one ("ffi")
            mode = "candidate_blocks" if candidate else "positions"
            rows += _forced_selects(op, shape, floor, sets, k, None, 8, mode, want)
        t = jax_time_us(lambda s, l: jax.lax.top_k(s, k)[1], sets)
        rows.append(Row(op, shape, "lax.top_k (baseline)", t, floor))
        ts = [torch.from_numpy(np.asarray(x[0])).cuda() for x in sets]
        t = kernel_time_us(lambda i: torch.topk(ts[i % 3], k, dim=1).indices)
        rows.append(Row(op, shape, "torch.topk (baseline)", t, floor))
    rows += bench_masked_topk(rng, bw, impls)
    return rows


def _forced_selects(op, shape, floor, sets, k, masked, block_size, mode, want) -> list[Row]:
    """Rows "ffi <select>" for every CUDA select that takes the call (sets: (scores, lens) or,
    `masked`, (scores, lens, blocks)), each checked against `want` (the reference's result on
    sets[0])."""
    from dsv41_jax.plan import Spec, device_record, select_declines
    from dsv41_jax.topk import ffi as topk_ffi

    rows = []
    for algorithm in topk_ffi.ALGORITHMS:
        members = sets[0][2] if masked else None
        spec_op = "select_candidate_blocks" if mode == "candidate_blocks" else "topk"
        spec = Spec.of(spec_op, sets[0][0], k, None, members, block_size)
        if select_declines(algorithm, spec, device_record()):
            continue

        def forced(s, lens, blocks=None, a=algorithm):
            return topk_ffi.cuda_topk(s, lens, k, None, blocks, block_size, mode, a)

        t = jax_time_us(forced, sets, want=want, what=f"{op} {shape} ffi {algorithm}")
        rows.append(Row(op, shape, f"ffi {algorithm}", t, floor))
    return rows


def bench_masked_topk(rng, bw, impls: Sequence[str]) -> list[Row]:
    """The consumer's mask path top-k: k=512 among the positions of 2048 candidate blocks of 8
    (random, ascending); floor = the candidate positions' scores (C·B·4 bytes per row)."""
    import torch

    import dsv41_jax as dj

    rows, c, b, k = [], 2048, 8, 512
    for bs, n in ((8, 131072), (64, 131072), (8, 1 << 20)):
        lens = jnp.full((bs,), n - 3, jnp.int32)
        blocks = jnp.asarray(
            np.sort(
                np.stack([rng.choice(n // b, c, replace=False) for _ in range(bs)]), axis=1
            ).astype(np.int32)
        )
        sets = [(testing.normal(rng, (bs, n)), lens, blocks) for _ in range(3)]
        floor = bs * c * b * 4 / (bw * 1e3)
        op, shape = "masked topk k=512", f"[{bs}, {n // 1024}K]"

        def fn(s, lens, blocks, impl):
            return dj.topk(s, lens, k, candidates=blocks, block_size=b, implementation=impl)

        want = jax.jit(functools.partial(fn, impl="reference"))(*sets[0])
        for impl in (*impls, None, "reference"):  # None: the dispatch's pick
            t = jax_time_us(
                functools.partial(fn, impl=impl), sets, want=want, what=f"{op} {shape} {impl}"
            )
            rows.append(Row(op, shape, impl or DEFAULT, t, floor))
        if "ffi" in impls:  # each select forced (the filter one reads only the candidate blocks)
            rows += _forced_selects(op, shape, floor, sets, k, True, b, "positions", want)
        member = np.zeros((bs, n // b), bool)
        np.put_along_axis(member, np.asarray(blocks), True, axis=1)
        mask = torch.from_numpy(np.repeat(member, b, axis=1)).cuda()
        ts = [torch.from_numpy(np.asarray(x[0])).cuda() for x in sets]
        t = kernel_time_us(
            lambda i: torch.topk(ts[i % 3].masked_fill(~mask, float("-inf")), k, dim=1).indices
        )
        rows.append(Row(op, shape, "torch mask + topk (baseline)", t, floor))
    return rows


SELECT_SHAPES = ((8, 131072), (64, 131072), (8, 1 << 20), (64, 1 << 20))
STEP_SHAPES = tuple((bs, ctx) for bs in (1, 8, 64) for ctx in (16384, 131072, 1 << 20))


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """`"bs8x1M,bs64x128K"` -> ((8, 1 << 20), (64, 131072)); ValueError naming a bad item."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        m = re.fullmatch(r"bs(\d+)\s*x\s*(\d+)([KM])", item, re.IGNORECASE)
        if m is None or int(m[1]) < 1 or int(m[2]) < 1:
            raise ValueError(f"shape {item!r} is not bs<batch>x<context>K|M (e.g. bs8x1M)")
        out.append((int(m[1]), int(m[2]) << (10 if m[3].upper() == "K" else 20)))
    return tuple(out)


def pick_shapes(shapes, quick: bool, quick_set, full_set) -> tuple[tuple[int, int], ...]:
    """The (batch, context) shapes a bench runs: `shapes` (from --shapes) when given, else its
    quick or full set."""
    if shapes:
        return tuple(shapes)
    return tuple(quick_set if quick else full_set)


def bench_select(rng, bw, quick: bool, shapes=None) -> list[Row]:
    """One consumer layer: the sparse path (sparse logits over C·B positions + top-k +
    map back) against the mask path (dense logits + masked top-k); floor = the candidate blocks'
    bytes (C·B tokens × 132 B per row) over the copy bandwidth."""
    import torch

    import dsv41_jax as dj

    cfg = dj.IndexerConfig()
    rows = []
    for bs, ctx in pick_shapes(shapes, quick, SELECT_SHAPES[:2], SELECT_SHAPES):
        caches, qs, lens, bt = testing.decode_inputs(
            rng, jax.random.key(bs + ctx), bs, ctx, layers=2
        )
        _, table = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))(
            qs[0], caches[0], lens, bt
        )
        shape = f"bs{bs} x {ctx // 1024}K"
        t = jax_time_us(
            lambda q, c, n, b: dj.publish(q, c, n, b, cfg),
            [(qs[0], caches[0], lens, bt), (qs[1], caches[1], lens, bt)],
        )
        rows.append(Row("publish (layer 20)", shape, "default", t, bs * ctx * 132 / (bw * 1e3)))
        floor = bs * cfg.candidate_positions * 132 / (bw * 1e3)
        sets = [(qs[1], caches[1], lens, bt, table), (qs[0], caches[0], lens, bt, table)]
        # The sparse path as the policy runs it (default), then each of its two forms forced:
        # one kernel ("onchip"), and its logits then the short select ("short").
        # Each is checked against the mask path's selection (the paths are bitwise equal).
        want = jax.jit(lambda *a: dj.select(*a, cfg, path="mask"))(*sets[0])
        for path, algorithm in (
            ("sparse", None),
            ("sparse", "onchip"),
            ("sparse", "short"),
            ("mask", None),
        ):
            t = jax_time_us(
                lambda *a, p=path, f=algorithm: dj.select(*a, cfg, path=p, topk_algorithm=f),
                sets,
                want=want,
                what=f"select {shape} {path} {algorithm}",
            )
            name = f"{path} path" + (f", {algorithm} top-k forced" if algorithm else "")
            rows.append(Row("select (consumer layer)", shape, name, t, floor))
        # torch: the mask path's selection part on the same dense logits (DeepGEMM logits are
        # not callable from this torch); add the logits row below to compare whole layers.
        logits = jax.jit(lambda q, c, n, b: dj.paged_mqa_logits(q, c, n, b))(
            qs[1], caches[1], lens, bt
        )
        t = jax_time_us(lambda *a: dj.paged_mqa_logits(*a), [s[:4] for s in sets])
        rows.append(Row("select (consumer layer)", shape, "dense logits alone (ffi)", t, floor))
        tl = torch.from_dlpack(logits)
        member = torch.zeros((bs, ctx // 8), dtype=torch.bool, device="cuda")
        tb = torch.from_dlpack(table.blocks)
        member.scatter_(1, torch.where(tb < ctx // 8, tb, 0).long(), True)
        mask = member.repeat_interleave(8, dim=1)
        t = kernel_time_us(
            lambda i, tl=tl, mask=mask: (
                torch.topk(tl.masked_fill(~mask, float("-inf")), 512, dim=1).indices
            )
        )
        rows.append(Row("select (consumer layer)", shape, "torch mask + topk (baseline)", t, floor))
        del caches, logits, tl, mask
    return rows


def _lax_step(cfg, qs, caches, lens, bt):
    """The same step composed from XLA ops: FFI logits, then jnp block maxima and lax.top_k for
    every selection (the baseline a JAX user without this library's selection kernels writes)."""
    import dsv41_jax as dj

    b, k, c = cfg.candidate_block_size, cfg.index_topk, cfg.candidate_topk_blocks
    logits = dj.paged_mqa_logits(qs[0], caches[0], lens, bt)
    n = logits.shape[1]
    pos = jnp.arange(n)[None]
    vis = pos < lens[:, None]
    masked = jnp.where(vis & ~jnp.isnan(logits), logits, -jnp.inf)
    top = jax.lax.top_k(masked, k)[1]
    nb = n // b
    amax = masked.reshape(-1, nb, b).max(axis=2)
    newest = (lens + b - 1) // b - 1
    amax = jnp.where(jnp.arange(nb)[None] == newest[:, None], jnp.inf, amax)
    blocks = jnp.sort(jax.lax.top_k(amax, c)[1], axis=1)
    member = (
        jnp.zeros((logits.shape[0], nb), bool)
        .at[jnp.arange(logits.shape[0])[:, None], blocks]
        .set(True)
    )
    sel = []
    for q, cache in zip(qs[1:], caches[1:]):
        lg = dj.paged_mqa_logits(q, cache, lens, bt)
        ok = vis & ~jnp.isnan(lg) & jnp.repeat(member, b, axis=1)
        sel.append(jnp.sort(jax.lax.top_k(jnp.where(ok, lg, -jnp.inf), k)[1], axis=1))
    return top, blocks, sel


def _torch_step_selection(tls, lens_t, cfg):
    """The step's selection in torch ops on the five layers' logits (the composition a PyTorch
    stack writes around DeepGEMM's logits): masked top-k of the source, block maxima with the
    newest block pinned, top-C blocks, and each consumer's top-k inside them."""
    import torch

    b, k, c = cfg.candidate_block_size, cfg.index_topk, cfg.candidate_topk_blocks
    rows, n = tls[0].shape
    vis = torch.arange(n, device=tls[0].device)[None] < lens_t[:, None]
    masked = tls[0].masked_fill(~vis | tls[0].isnan(), float("-inf"))
    top = torch.topk(masked, k, dim=1).indices.sort(dim=1).values
    amax = masked.view(rows, n // b, b).amax(dim=2)
    amax.scatter_(1, ((lens_t + b - 1) // b - 1).clamp(min=0)[:, None].long(), float("inf"))
    blocks = torch.topk(amax, c, dim=1).indices.sort(dim=1).values
    member = torch.zeros_like(amax, dtype=torch.bool).scatter_(1, blocks, True)
    ok = vis & member.repeat_interleave(b, dim=1)
    sels = [
        torch.topk(t.masked_fill(~ok | t.isnan(), float("-inf")), k, dim=1).indices.sort(dim=1)
        for t in tls[1:]
    ]
    return [top, blocks, *[x.values for x in sels]]


# The step's implementation column: the path, and which CUDA select the public top-k used
# (None: the dispatch's pick; otherwise that select forced wherever it takes the call).
STEP_ALGORITHMS = (None, "filter", "cluster")


def _step_impl(path: str, algorithm: str | None) -> str:
    """ "auto path (default)": sparse where the GPU has a sparse kernel, the dense top-k where
    every block is a candidate."""
    name = "auto path (default)" if path == "auto" else f"{path} path"
    return name + (f", {algorithm} top-k forced" if algorithm else "")


def bench_step(rng, bw, quick: bool, shapes=None) -> list[Row]:
    """The whole V4.1 decode indexer step in one jit (`make_two_level_indexer`: publish at layer
    20 + 4 consumers, each layer with its own cache), sparse and mask paths, beside an XLA
    composition with lax.top_k; plus the publish and one select alone (the per-layer split).
    Floor = the source layer's whole cache + 4 consumers' candidate blocks. The sparse and mask
    paths are also timed with the filter-first and the cluster radix select forced."""
    import dsv41_jax as dj

    cfg = dj.IndexerConfig()
    layers = (20, 24, 28, 32, 36)
    rows = []
    quick_set = ((1, 16384), (8, 131072), (64, 131072))
    for bs, ctx in pick_shapes(shapes, quick, quick_set, STEP_SHAPES):
        caches, qs, lens, bt = testing.decode_inputs(
            rng, jax.random.key(7 + bs + ctx), bs, ctx, layers=5
        )
        floor = (bs * ctx * 132 + 4 * bs * cfg.candidate_positions * 132) / (bw * 1e3)
        shape = f"bs{bs} x {ctx // 1024}K"
        qd, cd = dict(zip(layers, qs)), dict(zip(layers, caches))
        qr = dict(zip(layers, qs[::-1]))
        sets = [(qd, cd, lens, bt), (qr, cd, lens, bt)]
        variants = [("auto", None), *itertools.product(("sparse", "mask"), STEP_ALGORITHMS)]
        # Each variant's selections are checked against the mask path's (all bitwise equal).
        mask_ix = dj.make_two_level_indexer(
            cfg, source_layer=20, consumer_layers=layers[1:], path="mask"
        )
        want = jax.jit(mask_ix.decode)(*sets[0]).selections
        for path, algorithm in variants:
            ix = dj.make_two_level_indexer(
                cfg,
                source_layer=20,
                consumer_layers=layers[1:],
                path=path,
                topk_algorithm=algorithm,
            )
            t = jax_time_us(
                lambda *a, ix=ix: ix.decode(*a),
                sets,
                calls=10,
                want=want,
                what=f"step {shape} {path} {algorithm}",
                pick=lambda result: result.selections,
            )
            rows.append(
                Row(
                    "decode step (publish + 4 selects)",
                    shape,
                    _step_impl(path, algorithm),
                    t,
                    floor,
                )
            )
        t = jax_time_us(
            lambda *a: _lax_step(cfg, *a),
            [(qs, caches, lens, bt), (qs[::-1], caches, lens, bt)],
            calls=5,
        )
        rows.append(
            Row("decode step (publish + 4 selects)", shape, "XLA + lax.top_k (baseline)", t, floor)
        )
        # torch: the same DeepGEMM logits (timed here through this library's FFI call, 5 layers)
        # plus the selection in torch ops.
        import torch

        t_logits = jax_time_us(lambda *a: dj.paged_mqa_logits(*a), [(qs[0], caches[0], lens, bt)])
        tls = [
            torch.from_dlpack(jax.jit(dj.paged_mqa_logits)(q, c, lens, bt))
            for q, c in zip(qs, caches)
        ]
        lens_t = torch.from_dlpack(lens)
        t_sel = kernel_time_us(lambda i, tls=tls: _torch_step_selection(tls, lens_t, cfg), calls=5)
        rows.append(
            Row(
                "decode step (publish + 4 selects)",
                shape,
                "DeepGEMM logits + torch selection (baseline)",
                5 * t_logits + t_sel,
                floor,
            )
        )
        _, table = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))(
            qs[0], caches[0], lens, bt
        )
        for algorithm in STEP_ALGORITHMS:
            label = "default" if algorithm is None else f"{algorithm} top-k forced"
            t = jax_time_us(
                lambda q, c, n, b, f=algorithm: dj.publish(q, c, n, b, cfg, topk_algorithm=f),
                [(qs[0], caches[0], lens, bt)],
            )
            rows.append(Row("publish (layer 20)", shape, label, t, bs * ctx * 132 / (bw * 1e3)))
            for path in ("auto", "sparse", "mask") if algorithm is None else ("sparse", "mask"):
                t = jax_time_us(
                    lambda *a, p=path, f=algorithm: dj.select(*a, cfg, path=p, topk_algorithm=f),
                    [(qs[1], caches[1], lens, bt, table), (qs[2], caches[2], lens, bt, table)],
                )
                sel_floor = bs * cfg.candidate_positions * 132 / (bw * 1e3)
                rows.append(
                    Row(
                        "select (consumer layer)",
                        shape,
                        _step_impl(path, algorithm),
                        t,
                        sel_floor,
                    )
                )
        del caches, cd, qd
    return rows


def plot_step(rows: list[Row], out_dir: str, title: str) -> list[str]:
    """PNG plots of the step rows: step time against context (per batch, per path) and the
    per-layer split (publish + 4 × select) for each shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def parse(shape):
        bs, ctx = shape.split(" x ")
        return int(bs[2:]), int(ctx[:-1]) * 1024

    # Kernel time per step, and beside it the GPU span a serving loop sees (bench_loop).
    span_op = "decode step span (pipelined)"
    kinds = {"decode step (publish + 4 selects)": "", span_op: ", GPU span (serving loop)"}

    def series(r: Row) -> str:
        return r.impl + kinds[r.op]

    step = [r for r in rows if r.op in kinds and "outputs kept" not in r.impl]
    if not step:
        return []
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    batches = sorted({parse(r.shape)[0] for r in step})
    impls = list(dict.fromkeys(series(r) for r in step))
    markers = "osD^v<>phX*"
    style = {  # one colour and marker per implementation, the same in every panel
        impl: (plt.get_cmap("tab20")(i % 20), markers[i % len(markers)])
        for i, impl in enumerate(impls)
    }
    fig, axes = plt.subplots(
        1, len(batches), figsize=(4.6 * len(batches), 4), squeeze=False, sharey=True
    )
    for ax, bs in zip(axes[0], batches):
        for impl in impls:
            pts = sorted(
                (parse(r.shape)[1], r.us)
                for r in step
                if series(r) == impl and parse(r.shape)[0] == bs
            )
            if pts:
                color, marker = style[impl]
                ax.plot(
                    [p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=impl
                )
        ax.set(xscale="log", yscale="log", xlabel="context (positions)", title=f"bs {bs}")
    axes[0][0].set_ylabel("µs per step (kernel time; GPU span)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title, fontsize=9)
    paths.append(os.path.join(out_dir, "step_time.png"))
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    step = [r for r in step if r.op != span_op]
    batches = sorted({parse(r.shape)[0] for r in step})
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), squeeze=False)
    for ax, bs in zip(axes[0], batches):
        shapes = [sh for sh in dict.fromkeys(r.shape for r in step) if parse(sh)[0] == bs]
        for i, shape in enumerate(shapes):
            pub = next((r.us for r in rows if r.op == "publish (layer 20)" and r.shape == shape), 0)
            for j, path in enumerate(("sparse", "mask")):
                sel = next(
                    (
                        r.us
                        for r in rows
                        if r.op == "select (consumer layer)"
                        and r.shape == shape
                        and r.impl == f"{path} path"
                    ),
                    0.0,
                )
                x = i + (j - 0.5) * 0.38
                ax.bar(x, pub, 0.36, color="tab:blue", label="publish" if i == j == 0 else None)
                color = "tab:orange" if path == "sparse" else "tab:red"
                label = f"4 × select ({path})" if i == 0 else None
                ax.bar(x, 4 * sel, 0.36, bottom=pub, color=color, label=label)
        ax.set_xticks(range(len(shapes)), [sh.split(" x ")[1] for sh in shapes])
        ax.set(title=f"bs {bs} (left bar: sparse, right: mask)", xlabel="context")
    axes[0][0].set_ylabel("device µs, layers timed alone")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "step_split.png"))
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close("all")
    return paths


def read_runs(path: str) -> list[tuple[str, list[Row]]]:
    """Every benchmark table of a markdown file (as `--out` writes it, or
    BENCHMARKS_HISTORY.md, which holds one per run): (label, rows) in file order. The label is
    the heading above the table and the "Device:" line under that heading, if any."""
    runs: list[tuple[str, list[Row]]] = []
    with contextlib.redirect_stdout(io.StringIO()):  # a Row prints a progress line
        for table in bench_report.tables(open(path).read()):
            rows = [Row(*bench_report.key(r), *bench_report.figures(r)) for r in table.rows]
            runs.append((" / ".join(filter(None, (table.heading, table.device))), rows))
    return runs


def read_table(path: str, section: str | None = None) -> tuple[list[Row], str]:
    """The rows of one run in a saved file and a plot title for them: the run whose label
    (`read_runs`) contains `section` (e.g. a commit id), or by default the newest (last) run
    with decode-step rows. ValueError when no run, or more than one, matches."""
    runs = read_runs(path)
    if section:
        chosen = [r for r in runs if section in r[0]]
        if len(chosen) != 1:
            labels = "\n  ".join(label for label, _ in (chosen or runs))
            what = "several runs match" if chosen else "no run matches"
            raise ValueError(f"{path}: {what} {section!r}:\n  {labels}")
    else:
        chosen = [r for r in runs if any(x.op.startswith("decode step") for x in r[1])][-1:]
        if not chosen:
            raise ValueError(f"{path}: no table with decode-step rows")
    label, rows = chosen[0]
    device = next((part for part in label.split(" / ") if part.startswith("Device:")), "")
    if device:
        where = device.removeprefix("Device: ").split(";")[0]
        commit = device.split("commit ")[1].split(";")[0] if "commit " in device else ""
        title = ", ".join(filter(None, ("V4.1 indexer step", where, commit)))
    else:
        title = f"V4.1 indexer step, {label}"
    return rows, title


def bench_sharded(rng, bw) -> list[Row]:
    """Row sharding and DCP over every visible GPU at bs 64 × {128K, 1M}: the busiest GPU's
    device time per publish + select, and the collectives alone."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import dsv41_jax as dj
    from dsv41_jax import sharding

    devices = jax.devices()
    w = len(devices)
    if w < 2:
        return []
    mesh = Mesh(np.array(devices), ("x",))
    cfg = dj.IndexerConfig()
    rows = []
    for bs, ctx in ((64, 131072), (64, 1 << 20)):
        shape = f"bs{bs} x {ctx // 1024}K, {w} GPUs"
        # Row sharding: replicated cache, each GPU scores bs / W requests.
        caches, qs, lens, bt = testing.decode_inputs(
            rng, jax.random.key(ctx), bs, ctx, layers=2, sharding=NamedSharding(mesh, P())
        )

        def row_step(q0, q1, c0, c1, lens, bt):
            top, table = sharding.publish_row_sharded(q0, c0, lens, bt, cfg, mesh=mesh, axis="x")
            return top, sharding.select_row_sharded(
                q1, c1, lens, bt, table, cfg, mesh=mesh, axis="x"
            )

        args = [(qs[0], qs[1], caches[0], caches[1], lens, bt)]
        floor = (bs * ctx * 132 / w + bs * cfg.candidate_positions * 132 / w) / (bw * 1e3)
        rows.append(
            Row(
                "row-sharded publish + select",
                shape,
                "auto path",
                jax_time_us(row_step, args),
                floor,
            )
        )
        del caches
        # DCP: each GPU holds ctx / W positions of every request (interleave 1); the publishing
        # and the consuming layer have their own queries and caches (identical operands would
        # let XLA compute the logits once).
        local_ctx = ctx // w
        caches, qs, lens_local, bt = testing.decode_inputs(
            rng, jax.random.key(ctx + 1), bs * w, local_ctx, layers=2
        )
        stacked = [
            jax.device_put(c.data.reshape(w, -1, 64, 1, 132), NamedSharding(mesh, P("x")))
            for c in caches
        ]
        # Each device's page table is a permutation of its own pages.
        local_pages = bs * local_ctx // 64
        tables = jax.device_put(
            jnp.asarray(
                np.stack([rng.permutation(local_pages) for _ in range(w)])
                .astype(np.int32)
                .reshape(w, bs, -1)
            ),
            NamedSharding(mesh, P("x")),
        )
        glens = jnp.full((bs,), ctx, jnp.int32)
        q0, q1 = (jax.tree.map(lambda x: x[:bs], q) for q in qs)
        for exchange in ("topc", "pmax"):

            @functools.partial(
                jax.shard_map,
                mesh=mesh,
                in_specs=(P(), P(), P("x"), P("x"), P("x"), P()),
                out_specs=P(),
                check_vma=False,
            )
            def dcp_step(q0, q1, c0, c1, tables, glens, exchange=exchange):
                local0, local1 = dj.PagedIndexCache(c0[0]), dj.PagedIndexCache(c1[0])
                top, table = sharding.dcp_publish(
                    q0, local0, tables[0], glens, cfg, axis="x", exchange=exchange
                )
                sel = sharding.dcp_select(q1, local1, tables[0], glens, table, cfg, axis="x")
                return top, table.blocks, sel

            floor = 2 * bs * local_ctx * 132 / (bw * 1e3)
            t = jax_time_us(dcp_step, [(q0, q1, *stacked, tables, glens)])
            rows.append(Row("DCP publish + select", shape, f"exchange={exchange}", t, floor))
        # The collectives alone: the pmax of every block maximum vs the top-C all-gather.
        nb = ctx // 8
        blockmax = jax.device_put(jnp.zeros((w * bs, nb), jnp.float32), NamedSharding(mesh, P("x")))
        pairs = jax.device_put(
            jnp.zeros((w * bs, 2 * 2048), jnp.int32), NamedSharding(mesh, P("x"))
        )
        for name, fn, arg in (
            ("pmax block maxima", lambda x: jax.lax.pmax(x, "x"), blockmax),
            (
                "all-gather top-C pairs",
                lambda x: jax.lax.all_gather(x, "x", axis=1, tiled=True),
                pairs,
            ),
        ):
            f = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
            rows.append(Row(f"collective: {name}", shape, "nccl", jax_time_us(f, [(arg,)]), 0.0))
        del caches, stacked
    return rows


OPS = ("logits", "sort", "amax", "topk", "select", "step", "loop", "prefill", "sharded")
DEFAULT_OPS = tuple(op for op in OPS if op != "sharded")  # the single-GPU ones


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m dsv41_jax.bench",
        description="dsv41_jax device-time benchmarks. Measuring needs an NVIDIA GPU (JAX's "
        "CUDA backend, the CUDA extension built for the FFI rows) and torch (the bench extra: "
        "pip install 'dsv41_jax[bench]'): kernel time is read through torch.profiler (CUPTI) "
        "and torch gives the baselines. Plotting a saved table (--plots-from) needs neither, "
        "only matplotlib.",
    )
    ap.add_argument(
        "ops",
        nargs="*",
        help=f"what to run, any of: {' '.join(OPS)} (default: all but sharded); same as --only",
    )
    ap.add_argument("--quick", action="store_true", help="the short set (device check)")
    ap.add_argument(
        "--plots",
        default="",
        metavar="DIR",
        help="write the step plots (PNG) into DIR (bench_plots/ holds the tracked figures)",
    )
    ap.add_argument(
        "--plots-from",
        default="",
        metavar="FILE",
        help="instead of measuring, plot one run of a saved table (markdown, as --out writes it, "
        "or BENCHMARKS_HISTORY.md) into --plots DIR (required); needs no GPU",
    )
    ap.add_argument(
        "--section",
        default="",
        metavar="TEXT",
        help="with --plots-from: the run whose heading or Device line contains TEXT (e.g. a "
        "commit id; default: the newest run with decode-step rows)",
    )
    ap.add_argument("--only", default="", help=f"comma list of ops: {','.join(OPS)}")
    ap.add_argument(
        "--shapes",
        default="",
        metavar="LIST",
        help="select, step and loop run these shapes instead of their sets, e.g. bs8x1M,bs64x128K",
    )
    ap.add_argument("--topk-impls", default="ffi,pallas", help="top-k implementations to time")
    ap.add_argument("--breakdown", action="store_true", help="print the kernels behind each row")
    ap.add_argument("--out", default="", help="write the markdown table here")
    return ap


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, set[str]]:
    """The options and the ops to run; argparse's usage error (exit 2) for unknown ops and for
    options that need each other."""
    ap = parser()
    args = ap.parse_args(argv)
    asked = set(filter(None, (x.strip() for x in args.only.split(",")))) | set(args.ops)
    unknown = sorted(asked - set(OPS))
    if unknown:
        ap.error(f"unknown op(s): {', '.join(unknown)} (choose from {', '.join(OPS)})")
    if args.plots_from and not args.plots:
        ap.error(
            "--plots-from needs --plots DIR: where to write the plots (pass --plots bench_plots "
            "to replace the tracked figures)"
        )
    if args.section and not args.plots_from:
        ap.error("--section selects a run of --plots-from FILE")
    try:
        args.shapes = parse_shapes(args.shapes)
    except ValueError as e:
        ap.error(f"--shapes: {e}")
    return args, asked or set(DEFAULT_OPS)


def plots_from(args: argparse.Namespace) -> None:
    try:
        saved, title = read_table(args.plots_from, args.section or None)
    except ValueError as e:
        raise SystemExit(f"dsv41_jax.bench --plots-from: {e}") from None
    print(f"plotting {title} ({len(saved)} rows)")
    for path in plot_step(saved, args.plots, title):
        print("plot:", path)


def main(argv: list[str] | None = None) -> None:
    args, only = parse_args(argv)
    if args.plots_from:
        plots_from(args)
        return
    if jax.default_backend() != "gpu":
        raise SystemExit(
            f"dsv41_jax.bench measures on an NVIDIA GPU; JAX's backend here is "
            f"{jax.default_backend()!r} (--plots-from FILE --plots DIR needs no GPU)"
        )
    try:
        import torch  # noqa: F401 - CUPTI timing (torch.profiler) and the torch baselines
    except ImportError:
        raise SystemExit(
            "dsv41_jax.bench reads device time through torch.profiler and compares with torch "
            "baselines: install the bench extra (pip install 'dsv41_jax[bench]')"
        ) from None
    rng = np.random.default_rng(0)
    bw = copy_bandwidth_gbs()
    if args.breakdown:
        os.environ["DSV41_BENCH_BREAKDOWN"] = "1"
    rows: list[Row] = []
    if "logits" in only:
        rows += bench_logits(rng, bw, args.quick)
    if "sort" in only:
        rows += bench_sort(rng, bw)
    if "amax" in only:
        rows += bench_block_amax(rng, bw)
    if "topk" in only:
        rows += bench_topk(rng, bw, args.topk_impls.split(","))
    for name, bench in (
        ("select", lambda: bench_select(rng, bw, args.quick, args.shapes)),
        ("step", lambda: bench_step(rng, bw, args.quick, args.shapes)),
        ("prefill", lambda: bench_prefill(rng, bw, args.quick)),
    ):
        if name in only:
            print(f"bench: {name} ...", flush=True)
            rows += bench()
    if "loop" in only:
        from dsv41_jax.bench_loop import LOOP_SHAPES, LOOP_SHAPES_QUICK, bench_loop

        print("bench: loop ...", flush=True)
        shapes = pick_shapes(args.shapes, args.quick, LOOP_SHAPES_QUICK, LOOP_SHAPES)
        rows += bench_loop(rng, bw, shapes, Row)
    if "sharded" in only:
        print("bench: sharded ...", flush=True)
        rows += bench_sharded(rng, bw)
    commit = (
        os.environ.get("DSV41_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    device = jax.devices()[0].device_kind
    lines = [
        f"Device: {device}; measured copy bandwidth {bw / 1e3:.2f} TB/s; "
        f"date {datetime.date.today()}; commit {commit or 'unknown'}; jax {jax.__version__}.",
        "",
        "| op | shape | implementation | device µs | floor µs | vs floor |",
        "|---|---|---|---|---|---|",
        *[r.md() for r in rows],
    ]
    text = "\n".join(lines)
    print(text)
    if BREAKDOWN:
        print("\nkernel breakdown (us per call, in timing order):")
        print("\n".join(BREAKDOWN))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plots:
        title = f"V4.1 indexer step, {device}, {datetime.date.today()}, {commit or 'unknown'}"
        for path in plot_step(rows, args.plots, title):
            print("plot:", path)


if __name__ == "__main__":
    main()
