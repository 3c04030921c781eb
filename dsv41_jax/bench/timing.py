"""How the bench measures: GPU kernel time per call from CUPTI (through torch.profiler), the
result checked before it is timed, the copy bandwidth that sets the floors, and a serving
loop's host wall and GPU span."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

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


def host_wall_us(fn: Callable[[], object], calls: int, keep: bool = False) -> float:
    """Host µs per call over `calls` back-to-back calls and one sync at the end."""
    t = time.perf_counter()
    if keep:
        out = [fn() for _ in range(calls)]
    else:
        for _ in range(calls):
            out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / calls * 1e6


def gpu_span_us(fn: Callable[[], object], calls: int, keep: bool = False) -> dict[str, float]:
    """{span, sum, kernels} per call of `calls` back-to-back calls, from CUPTI."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        host_wall_us(fn, calls, keep)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    kinds = ("kernel", "gpu_memcpy", "gpu_memset")
    k = [e for e in events if e.get("ph") == "X" and e.get("cat") in kinds]
    if not k:
        return dict(span=0.0, sum=0.0, kernels=0.0)
    span = max(e["ts"] + e["dur"] for e in k) - min(e["ts"] for e in k)
    return dict(span=span / calls, sum=sum(e["dur"] for e in k) / calls, kernels=len(k) / calls)
