"""Device-time benchmarks: `python -m dsv41_jax.bench [--quick] [--out BENCHMARKS.md]`.

Runs on a GPU machine. Time is GPU kernel time read from CUPTI (through torch.profiler, which
records every kernel of the process, JAX's included): the sum of kernel durations inside the
timed window divided by the calls in it, median of repeats. Host dispatch is never timed. Inputs
rotate over several sets so repeated calls do not hit a warm cache. Every row stands beside its
floor: the bytes it must move over the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

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
        per_call.append(sum(e.get("dur", 0) for e in device) / calls)
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


def jax_time_us(fn: Callable, arg_sets: Sequence[tuple], calls: int = 20) -> float:
    f = jax.jit(fn)
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

    def md(self) -> str:
        ratio = self.us / self.floor_us if self.floor_us else float("nan")
        cells = (self.op, self.shape, self.impl, f"{self.us:.1f}", f"{self.floor_us:.1f}")
        return "| " + " | ".join(cells) + f" | {ratio:.1f}x |"


def _rand(rng, shape):
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32))


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
                q = dj.quantize_queries(_rand(rng, (bs, 1, 32, 128)), _rand(rng, (bs, 1, 32)))
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
        sets = [(_rand(rng, (bs, n)), jnp.full((bs,), n - 5, jnp.int32)) for _ in range(2)]
        floor = bs * n * 4 * (1 + 1 / 8) / (bw * 1e3)
        for impl in ("pallas", "reference"):
            t = jax_time_us(lambda s, l, impl=impl: dj.block_amax(s, l, implementation=impl), sets)
            rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", impl, t, floor))
        ts = [torch.from_numpy(np.asarray(s[0])).cuda() for s in sets]
        t = kernel_time_us(lambda i: ts[i % 2].view(bs, -1, 8).amax(-1))
        rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", "torch amax (baseline)", t, floor))
    return rows


def bench_topk(rng, bw, impls: Sequence[str]) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    cases = [
        ("topk k=512", 8, 131072, 512),
        ("topk k=512", 64, 131072, 512),
        ("topk k=512", 8, 1 << 20, 512),
        ("candidate top-2048", 8, 16384, 2048),
    ]
    for op, bs, n, k in cases:
        candidate = op.startswith("candidate")
        length = n * 8 - 3 if candidate else n - 3  # candidate rows: lengths in positions
        sets = [(_rand(rng, (bs, n)), jnp.full((bs,), length, jnp.int32)) for _ in range(3)]
        floor = bs * n * 4 / (bw * 1e3)
        shape = f"[{bs}, {n // 1024}K]"
        for impl in (*impls, "reference"):

            def fn(s, lens, impl=impl):
                if candidate:
                    return dj.select_candidate_blocks(
                        s, lens, num_candidates=k, implementation=impl
                    )
                return dj.topk(s, lens, k, implementation=impl)

            rows.append(Row(op, shape, impl, jax_time_us(fn, sets), floor))
        t = jax_time_us(lambda s, l: jax.lax.top_k(s, k)[1], sets)
        rows.append(Row(op, shape, "lax.top_k (baseline)", t, floor))
        ts = [torch.from_numpy(np.asarray(x[0])).cuda() for x in sets]
        t = kernel_time_us(lambda i: torch.topk(ts[i % 3], k, dim=1).indices)
        rows.append(Row(op, shape, "torch.topk (baseline)", t, floor))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description="dsv41_jax device-time benchmarks")
    ap.add_argument("--quick", action="store_true", help="the short set (device check)")
    ap.add_argument("--only", default="", help="comma list: logits,sort,amax,topk")
    ap.add_argument("--topk-impls", default="ffi,pallas", help="top-k implementations to time")
    ap.add_argument("--breakdown", action="store_true", help="print the kernels behind each row")
    ap.add_argument("--out", default="", help="write the markdown table here")
    args = ap.parse_args()
    if jax.default_backend() != "gpu":
        raise SystemExit("dsv41_jax.bench needs a GPU")
    rng = np.random.default_rng(0)
    bw = copy_bandwidth_gbs()
    only = set(filter(None, args.only.split(","))) or {"logits", "sort", "amax", "topk"}
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


if __name__ == "__main__":
    main()
