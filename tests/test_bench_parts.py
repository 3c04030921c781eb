"""The bench's CPU-runnable parts (benchmarks/): a row and the table it goes in, the trace
arithmetic behind each figure, the result checks, the run's Timer, the host wall of back-to-back
calls and the interleaved medians, and that every module imports without torch or a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import args, table, timing

ROOT = Path(__file__).parents[1]


def test_row_prints_progress_and_formats_its_cells(capsys):
    row = table.Row("topk k=512", "[8, 16K]", "ffi", 12.34, 2.5)
    assert capsys.readouterr().out == "bench: topk k=512 | [8, 16K] | ffi: 12.3 us\n"
    assert row.md() == "| topk k=512 | [8, 16K] | ffi | 12.3 | 2.5 | 4.9x |"
    # No floor (host walls, collectives): a dash, and no ratio.
    wall = table.Row("all-gather", "[8, 2048]", "2 GPUs", 7.04, 0.0)
    assert wall.md() == "| all-gather | [8, 2048] | 2 GPUs | 7.0 | – | – |"


def test_markdown_table_reads_back(tmp_path):
    """What `--out` writes is a run `read_runs` reads back: the same rows, the Device line in its
    label."""
    rows = [
        table.Row("decode step (publish + 4 selects)", "bs8 x 128K", "sparse path", 200.5, 48.4),
        table.Row("publish (layer 20)", "bs8 x 128K", "default", 31.0, 0.0),
    ]
    device = "Device: NVIDIA H200; measured copy bandwidth 4.30 TB/s; commit abc1234; jax 0.11.2."
    text = table.markdown(device, rows)
    assert text.splitlines()[:2] == [device, ""] and text.splitlines()[-1] == rows[-1].md()
    path = tmp_path / "bench.md"
    path.write_text("## A run\n\n" + text + "\n")
    ((label, back),) = table.read_runs(str(path))
    assert back == rows and label == f"A run / {device}"
    assert table.read_table(str(path)) == (rows, "V4.1 indexer step, NVIDIA H200, abc1234")


def test_read_table_takes_the_history_newest_step_run():
    """BENCHMARKS_HISTORY.md as it stands: the default run is the one that holds the file's last
    decode-step row of a benchmark table, titled with the commit of its Device line."""
    history = ROOT / "BENCHMARKS_HISTORY.md"
    lines = history.read_text().splitlines()
    row = re.compile(r"\| (decode step[^|]*) \| ([^|]+) \| ([^|]+) \| (\d+\.\d) \| ([\d.]+|–) \|")
    last = max(i for i, line in enumerate(lines) if row.match(line))
    found = row.match(lines[last])
    assert found is not None
    op, shape, impl, us = found.groups()[:4]
    device = next(line for line in reversed(lines[:last]) if line.startswith("Device:"))
    commit = device.split("commit ")[1].split(";")[0]
    rows, title = table.read_table(str(history))
    assert (op, shape, impl, float(us)) in [(r.op, r.shape, r.impl, r.us) for r in rows]
    assert title == f"V4.1 indexer step, NVIDIA H200, {commit}"


def event(name, ts, dur, device=0, cat="kernel", ph="X"):
    return {"ph": ph, "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"device": device}}


# Two calls on GPU 0 (a kernel each and a copy), a kernel on GPU 1, and host-side events.
TRACE = [
    event("topk_kernel", 0, 10),
    event("Memcpy DtoD", 12, 4, cat="gpu_memcpy"),
    event("topk_kernel", 20, 10),
    event("nccl_allgather", 2, 30, device=1),
    event("cudaLaunchKernel", 0, 100, cat="cuda_runtime"),
    event("topk_kernel", 40, 0, ph="i"),
]


def test_trace_arithmetic():
    device = timing.device_events(TRACE)
    assert [e["name"] for e in device] == [
        "topk_kernel",
        "Memcpy DtoD",
        "topk_kernel",
        "nccl_allgather",
    ]
    assert timing.busiest_us(device, calls=2) == 15.0  # GPU 1: 30 µs over 2 calls; GPU 0: 24
    assert timing.busiest_us(device[:3], calls=2) == 12.0
    assert timing.busiest_us([], calls=2) == 0.0
    # A dependent launch beside the kernel before it: the time they overlap counts once.
    beside = [event("topk", 0, 10), event("top_c", 6, 8), event("topk", 20, 4)]
    assert timing.busiest_us(beside, calls=1) == 18.0
    assert timing.span_us(device[:3], calls=2) == dict(span=15.0, sum=12.0, kernels=1.5)
    assert timing.span_us(device, calls=2) == dict(span=16.0, sum=27.0, kernels=2.0)
    assert timing.span_us([], calls=2) == dict(span=0.0, sum=0.0, kernels=0.0)


def test_breakdown_names_the_four_longest_kernels():
    device = timing.device_events(TRACE)
    line = timing.breakdown_line(device, calls=2)
    assert line == "nccl_allgather: 15.0; topk_kernel: 10.0; Memcpy DtoD: 2.0"
    many = [event(f"k{i}", 0, i) for i in range(1, 6)] + [event("x" * 120, 0, 9)]
    assert timing.breakdown_line(many, calls=1) == f"{'x' * 90}: 9.0; k5: 5.0; k4: 4.0; k3: 3.0"


def test_check_result():
    x = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    timing.check_result({"a": x, "b": (x, x)}, {"a": np.asarray(x), "b": (x, x)}, "equal")
    with pytest.raises(timing.WrongResult, match="select bs8: the result differs"):
        timing.check_result(x.at[0, 0].set(7), x, "select bs8")
    with pytest.raises(timing.WrongResult):
        timing.check_result(x[:, :2], x, "a narrower result")
    with pytest.raises(timing.WrongResult):
        timing.check_result([x], [x, x], "fewer arrays")


def test_check_result_of_logits_by_similarity():
    """Logits of two differently compiled programs: close where the want is finite, equal
    (-inf, NaN) elsewhere; selections (integers) stay bitwise."""
    rng = np.random.default_rng(0)
    want = rng.standard_normal((4, 64)).astype(np.float32)
    want[0, 5:], want[1, 3] = -np.inf, np.nan
    near = want * np.float32(1 + 1e-7)
    timing.check_result(near, want, "logits", similar=5e-6)
    with pytest.raises(timing.WrongResult):
        timing.check_result(near, want, "logits")  # not bitwise
    for bad in (want * 1.01 + 0.5, np.where(np.isinf(want), 0.0, near)):
        with pytest.raises(timing.WrongResult):
            timing.check_result(bad.astype(np.float32), want, "logits", similar=5e-6)
    invisible = np.full((2, 3), -np.inf, np.float32)  # no finite entry: compared exactly
    timing.check_result(invisible, invisible, "rows of length 0", similar=5e-6)
    with pytest.raises(timing.WrongResult):
        timing.check_result(np.zeros_like(invisible), invisible, "rows of length 0", similar=5e-6)
    off_by_one = np.arange(6, dtype=np.int32)
    with pytest.raises(timing.WrongResult):
        timing.check_result(off_by_one + 1, off_by_one, "a selection", similar=5e-6)


def test_timer_carries_the_runs_breakdown(monkeypatch):
    """A Timer hands its breakdown list to every timing (None without --breakdown), and checks
    a result before timing it."""
    seen = []

    def fake(run, calls, breakdown):
        seen.append((calls, breakdown))
        if breakdown is not None:
            breakdown.append(f"{calls} calls")
        return 1.0

    monkeypatch.setattr(timing, "kernel_time_us", fake)
    x = jnp.ones((2, 3))
    kept: list[str] = []
    assert timing.Timer(breakdown=kept).jax_us(lambda a: a + 1, [(x,)], calls=3) == 1.0
    assert timing.Timer(breakdown=kept).kernel_us(lambda i: x, calls=4) == 1.0
    assert timing.Timer().jax_us(lambda a: a, [(x,)]) == 1.0
    assert kept == ["3 calls", "4 calls"] and seen[-1] == (20, None)
    with pytest.raises(timing.WrongResult, match="sum"):
        timing.Timer(breakdown=kept).jax_us(
            lambda a: {"s": a.sum()}, [(x,)], want=7.0, what="sum", pick=lambda r: r["s"]
        )
    assert len(seen) == 3  # the wrong result was never timed


def test_host_wall_calls_back_to_back():
    calls = []
    wall = timing.host_wall_us(lambda: calls.append(1) or jnp.zeros(2), 5)
    assert len(calls) == 5 and wall > 0
    wall = timing.host_wall_us(lambda: calls.append(1) or jnp.zeros(2), 3, keep=True)
    assert len(calls) == 8 and wall > 0


def test_interleaved_medians_alternate_the_variants(monkeypatch):
    """Each round times every variant in turn (host wall every round, GPU span every other
    round); each figure is the median of its rounds."""
    seen = []
    walls = {"a": iter([5.0, 1.0, 3.0]), "b": iter([2.0, 2.0, 9.0])}
    spans = {"a": iter([10.0, 30.0]), "b": iter([20.0, 20.0])}

    def wall(fn, calls, keep):
        seen.append((f"wall {fn()}", calls, keep))
        return next(walls[fn()])

    def span(fn, calls, keep, marks=()):
        assert marks == ()
        seen.append((f"span {fn()}", calls, keep))
        s = next(spans[fn()])
        return dict(span=s, sum=s / 2, kernels=4.0)

    monkeypatch.setattr(timing, "host_wall_us", wall)
    monkeypatch.setattr(timing, "gpu_span_us", span)
    got = timing.interleaved_medians({"a": (lambda: "a", False), "b": (lambda: "b", True)}, 3, 7)
    assert got == {
        "a": dict(host=3.0, span=20.0, sum=10.0, kernels=4.0),
        "b": dict(host=2.0, span=20.0, sum=10.0, kernels=4.0),
    }
    rounds = "wall a, span a, wall b, span b, wall a, wall b, wall a, span a, wall b, span b"
    assert [what for what, _, _ in seen] == rounds.split(", ")
    assert {(what[-1], calls, keep) for what, calls, keep in seen} == {
        ("a", 7, False),
        ("b", 7, True),
    }


def test_every_bench_module_imports_without_torch_or_a_gpu():
    code = (
        "import importlib, pkgutil, sys\n"
        "sys.modules['torch'] = None  # import torch raises ImportError\n"
        "import benchmarks as bench\n"
        "names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__))\n"
        "for name in names:\n"
        "    importlib.import_module(f'benchmarks.{name}')\n"
        "print(' '.join(names))\n"
    )
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = set(done.stdout.split())
    families = {"logits", "blocks", "topk", "select", "step", "model", "prefill", "sharded"}
    parts = {"__main__", "args", "cli", "timing", "table", "plots", "inputs", "report"}
    assert parts | families <= names


def test_a_shape_past_the_devices_memory_is_skipped_with_a_line(monkeypatch, capsys):
    class Device:
        def __init__(self, stats):
            self.stats = stats

        def memory_stats(self):
            return self.stats

    monkeypatch.setattr(args.jax, "devices", lambda: [Device({"bytes_limit": 60 << 30})])
    assert args.fits_device("step bs8 x 1024K", 11 << 30)
    assert capsys.readouterr().out == ""
    assert not args.fits_device("step bs64 x 1024K", 83 << 30)
    out = capsys.readouterr().out
    assert (
        out
        == "bench: step bs64 x 1024K skipped: needs about 83 GiB, the device's limit is 60 GiB\n"
    )
    # A device that does not say (the CPU): run it.
    monkeypatch.setattr(args.jax, "devices", lambda: [Device(None)])
    assert args.fits_device("step bs64 x 1024K", 83 << 30)
