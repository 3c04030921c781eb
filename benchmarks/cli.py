"""`python -m benchmarks`: runs the ops asked for, in order, and writes their table (and
plots); or plots a saved table (`--plots-from`)."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess

import jax
import numpy as np

from benchmarks.args import parse_args, pick_shapes
from benchmarks.blocks import bench_block_amax, bench_sort
from benchmarks.logits import bench_logits
from benchmarks.model import MODEL_SHAPES, MODEL_SHAPES_QUICK, bench_model
from benchmarks.plots import plot_step
from benchmarks.prefill import bench_prefill
from benchmarks.select import bench_select
from benchmarks.sharded import bench_sharded
from benchmarks.step import bench_step
from benchmarks.table import Row, markdown, read_table
from benchmarks.timing import Timer, copy_bandwidth_gbs
from benchmarks.topk import bench_topk


def plots_from(args: argparse.Namespace) -> None:
    try:
        saved, title = read_table(args.plots_from, args.section or None)
    except (OSError, ValueError) as e:  # unreadable, or no run of decode-step rows
        raise SystemExit(f"python -m benchmarks --plots-from: {e}") from None
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
            f"python -m benchmarks measures on an NVIDIA GPU; JAX's backend here is "
            f"{jax.default_backend()!r} (--plots-from FILE --plots DIR needs no GPU)"
        )
    try:
        import torch  # noqa: F401 - CUPTI timing (torch.profiler) and the torch baselines
    except ImportError:
        raise SystemExit(
            "python -m benchmarks reads device time through torch.profiler and compares with torch "
            "baselines: install the bench extra (pip install 'dsv41_jax[bench]')"
        ) from None
    rng = np.random.default_rng(0)
    bw = copy_bandwidth_gbs()
    timer = Timer(breakdown=[] if args.breakdown else None)
    rows: list[Row] = []
    if "logits" in only:
        rows += bench_logits(timer, rng, bw, args.quick)
    if "sort" in only:
        rows += bench_sort(timer, rng, bw)
    if "amax" in only:
        rows += bench_block_amax(timer, rng, bw)
    if "topk" in only:
        rows += bench_topk(timer, rng, bw, args.topk_impls.split(","))
    for name, bench in (
        ("select", lambda: bench_select(timer, rng, bw, args.quick, args.shapes)),
        ("step", lambda: bench_step(timer, rng, bw, args.quick, args.shapes)),
        ("prefill", lambda: bench_prefill(timer, rng, bw, args.quick)),
    ):
        if name in only:
            print(f"bench: {name} ...", flush=True)
            rows += bench()
    if "model" in only:
        print("bench: model ...", flush=True)
        shapes = pick_shapes(args.shapes, args.quick, MODEL_SHAPES_QUICK, MODEL_SHAPES)
        rows += bench_model(bw, shapes, timer.breakdown)
    if "sharded" in only:
        print("bench: sharded ...", flush=True)
        rows += bench_sharded(timer, rng, bw)
    commit = (
        os.environ.get("DSV41_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    device = jax.devices()[0].device_kind
    text = markdown(
        f"Device: {device}; measured copy bandwidth {bw / 1e3:.2f} TB/s; "
        f"date {datetime.date.today()}; commit {commit or 'unknown'}; jax {jax.__version__}.",
        rows,
    )
    print(text)
    if timer.breakdown:
        print("\nkernel breakdown (us per call, in timing order):")
        print("\n".join(timer.breakdown))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plots:
        title = f"V4.1 indexer step, {device}, {datetime.date.today()}, {commit or 'unknown'}"
        for path in plot_step(rows, args.plots, title):
            print("plot:", path)
