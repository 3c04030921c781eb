"""How the bench measures: GPU kernel time per call from CUPTI (through torch.profiler), the
result checked before it is timed, the copy bandwidth that sets the floors, and the host wall
and GPU span of back-to-back calls."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # trace events that are GPU work


def kernel_time_us(
    run: Callable[[int], object],
    calls: int = 20,
    repeats: int = 5,
    breakdown: list[str] | None = None,
) -> float:
    """Median over repeats of GPU kernel time per call of `run(i)` (i = call index); with
    `breakdown`, a line naming the kernels behind it (`breakdown_line`) is appended there."""
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
        device = device_events(trace_events(prof))
        per_call.append(busiest_us(device, calls))
    if breakdown is not None:  # the last repeat's kernels
        breakdown.append(breakdown_line(device, calls))
    return statistics.median(per_call)


def trace_events(prof: Any) -> list[dict[str, Any]]:
    """The events of a finished torch.profiler run, read from its chrome trace."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as trace:
            events: list[dict[str, Any]] = json.load(trace)["traceEvents"]
    return events


def device_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU work of a trace: its kernels, copies and memsets."""
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_WORK]


def busiest_us(device: list[dict[str, Any]], calls: int) -> float:
    """Busy µs per call of the busiest GPU (one GPU: its kernel time; several: the slowest): the
    time at least one of its kernels ran, so kernels that overlap (a dependent launch running
    beside the kernel before it) count once."""
    intervals: dict[object, list[tuple[float, float]]] = {}
    for e in device:
        dev = e.get("args", {}).get("device", 0)
        intervals.setdefault(dev, []).append((e["ts"], e["ts"] + e.get("dur", 0)))
    busy = []
    for spans in intervals.values():
        total, end = 0.0, -math.inf
        for start, stop in sorted(spans):
            if stop > end:
                total += stop - max(start, end)
                end = stop
        busy.append(total)
    return max(busy, default=0.0) / calls


BREAKDOWN_KERNELS = 4  # the kernels a breakdown line names


def breakdown_line(device: list[dict[str, Any]], calls: int) -> str:
    """The BREAKDOWN_KERNELS kernels that took the most time, each with its µs per call
    (--breakdown)."""
    by_name: dict[str, float] = {}
    for e in device:
        name = e.get("name", "?")[:90]
        by_name[name] = by_name.get(name, 0.0) + e["dur"]
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:BREAKDOWN_KERNELS]
    return "; ".join(f"{n}: {d / calls:.1f}" for n, d in top)


def _block(x: object) -> object:
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


def similarity_gap(x: np.ndarray, y: np.ndarray) -> float:
    """DeepGEMM's measure of two logit arrays: 1 - 2·Σxy / Σ(x² + y²) (0: equal)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(1 - 2 * (x * y).sum() / max((x * x + y * y).sum(), 1e-30))


def _matches(got: np.ndarray, want: np.ndarray, similar: float | None) -> bool:
    if similar is None or not np.issubdtype(want.dtype, np.floating):
        return np.array_equal(got, want)
    if got.shape != want.shape:
        return False
    finite = np.isfinite(want)
    same_elsewhere = np.array_equal(got[~finite], want[~finite], equal_nan=True)
    if not finite.any():
        return same_elsewhere
    return same_elsewhere and similarity_gap(got[finite], want[finite]) < similar


def check_result(got: object, want: object, what: str, similar: float | None = None) -> None:
    """Raise WrongResult unless the pytrees `got` and `want` hold equal arrays (selections are
    exact, so equal means bitwise). `similar`: floats of two differently compiled programs
    (logits) are compared by `similarity_gap` below it where `want` is finite, and must equal
    it elsewhere (-inf, NaN)."""
    g, w = jax.tree.leaves(got), jax.tree.leaves(want)
    if len(g) != len(w) or not all(
        _matches(np.asarray(a), np.asarray(b), similar) for a, b in zip(g, w)
    ):
        raise WrongResult(f"{what}: the result differs from what it is checked against")


def whole(result: object) -> object:
    """The result itself: what `jax_time_us` checks unless told to pick a part."""
    return result


def jax_time_us(
    fn: Callable[..., object],
    arg_sets: Sequence[tuple[Any, ...]],
    calls: int = 20,
    want: object = None,
    what: str = "",
    pick: Callable[[object], object] = whole,
    breakdown: list[str] | None = None,
    similar: float | None = None,
) -> float:
    """Kernel time per call of jit(fn) over `arg_sets`; with `want` (what `pick` of its result
    on `arg_sets[0]` must be, e.g. the reference's), the result is checked first
    (WrongResult; `similar`: as `check_result`'s). `breakdown`: as `kernel_time_us`'s."""
    f = jax.jit(fn)
    if want is not None:
        check_result(pick(f(*arg_sets[0])), want, what, similar)
    return kernel_time_us(lambda i: f(*arg_sets[i % len(arg_sets)]), calls, breakdown=breakdown)


@dataclass(frozen=True)
class Timer:
    """How one run times its rows: `kernel_time_us` and `jax_time_us` with the run's
    `breakdown` (a list when --breakdown asks for the kernels behind each row, else None)."""

    breakdown: list[str] | None = None

    def kernel_us(self, run: Callable[[int], object], calls: int = 20) -> float:
        """`kernel_time_us(run, calls)`, its kernels added to this run's breakdown."""
        return kernel_time_us(run, calls, breakdown=self.breakdown)

    def jax_us(
        self,
        fn: Callable[..., object],
        arg_sets: Sequence[tuple[Any, ...]],
        calls: int = 20,
        **check: Any,
    ) -> float:
        """`jax_time_us(fn, arg_sets, calls, **check)` (`check`: its want / what / pick /
        similar), its kernels added to this run's breakdown."""
        return jax_time_us(fn, arg_sets, calls, breakdown=self.breakdown, **check)


def copy_bandwidth_gbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), measured now."""
    x = jnp.ones(nbytes // 8, jnp.float32)  # read nbytes/2, write nbytes/2
    t = jax_time_us(lambda a: a + 1.0, [(x,)], calls=10)
    return nbytes / (t * 1e-6) / 1e9


def host_wall_us(fn: Callable[[], object], calls: int, keep: bool = False) -> float:
    """Host µs per call over `calls` back-to-back calls and one sync at the end."""
    t = time.perf_counter()
    out: object
    if keep:
        out = [fn() for _ in range(calls)]
    else:
        for _ in range(calls):
            out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / calls * 1e6


def profiled_events(
    fn: Callable[[], object], calls: int, keep: bool = False
) -> list[dict[str, Any]]:
    """The GPU work (`device_events`) of `calls` back-to-back calls of `fn`, from CUPTI."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        host_wall_us(fn, calls, keep)
        torch.cuda.synchronize()
    return device_events(trace_events(prof))


def gpu_span_us(
    fn: Callable[[], object], calls: int, keep: bool = False, marks: Sequence[str] = ()
) -> dict[str, float]:
    """{span, sum, kernels} per call of `calls` back-to-back calls, from CUPTI; with `marks`,
    also `marked`: the time of the kernels whose name holds one of them."""
    device = profiled_events(fn, calls, keep)
    out = span_us(device, calls)
    if marks:
        mine = [e for e in device if any(m in e.get("name", "") for m in marks)]
        out["marked"] = sum(e["dur"] for e in mine) / calls
    return out


def span_us(device: list[dict[str, Any]], calls: int) -> dict[str, float]:
    """{span, sum, kernels} per call of the GPU work `device` of `calls` calls: first start to
    last end, the durations' sum, the count."""
    if not device:
        return dict(span=0.0, sum=0.0, kernels=0.0)
    span = max(e["ts"] + e["dur"] for e in device) - min(e["ts"] for e in device)
    total = sum(e["dur"] for e in device)
    return dict(span=span / calls, sum=total / calls, kernels=len(device) / calls)


def interleaved_medians(
    variants: dict[str, tuple[Callable[[], object], bool]],
    rounds: int = 5,
    calls: int = 50,
    marks: Sequence[str] = (),
) -> dict[str, dict[str, float]]:
    """Per variant, medians over interleaved rounds (the variants alternate, so the shared
    host's noise falls on all of them) of the host wall (`host_wall_us`, every round) and of
    `gpu_span_us`' span, kernel sum and kernel count (every other round): {host, span, sum,
    kernels} (and `marked`, with `marks`: as `gpu_span_us`'). `variants`: name -> (zero-argument
    call, keep every call's outputs alive)."""
    for fn, _ in variants.values():
        for _ in range(3):
            jax.block_until_ready(fn())
    host: dict[str, list[float]] = {name: [] for name in variants}
    gpu: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, (fn, keep) in variants.items():
            host[name].append(host_wall_us(fn, calls, keep))
            if r % 2 == 0:
                gpu[name].append(gpu_span_us(fn, calls, keep, marks=marks))
    return {
        name: dict(
            host=statistics.median(host[name]),
            **{key: statistics.median(g[key] for g in gpu[name]) for key in gpu[name][0]},
        )
        for name in variants
    }
