"""The bench's command line: its options, the ops to run and the shapes."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from collections.abc import Sequence

import jax

OPS = ("logits", "sort", "amax", "topk", "select", "step", "model", "prefill", "sharded")
DEFAULT_OPS = tuple(op for op in OPS if op != "sharded")  # the single-GPU ones


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
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
        help="select, step and model run these shapes instead of their sets, e.g. bs8x1M,bs64x128K",
    )
    ap.add_argument(
        "--topk-impls",
        default="ffi,pallas",
        help="top-k implementations to time beside the dispatch's pick and the reference: a "
        "comma list of ffi, pallas",
    )
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
    if args.plots_from and not os.path.isfile(args.plots_from):
        what = "is a folder" if os.path.isdir(args.plots_from) else "does not exist"
        ap.error(f"--plots-from {args.plots_from!r} {what}: pass a saved table (markdown)")
    if args.plots and importlib.util.find_spec("matplotlib") is None:
        ap.error("--plots needs matplotlib (pip install matplotlib)")
    impls = [x.strip() for x in args.topk_impls.split(",") if x.strip()]
    bad = [x for x in impls if x not in ("ffi", "pallas")]
    if bad or not impls:
        ap.error(f"--topk-impls: {', '.join(bad) or 'none given'} (a comma list of ffi, pallas)")
    args.topk_impls = ",".join(impls)
    try:
        args.shapes = parse_shapes(args.shapes)
    except ValueError as e:
        ap.error(f"--shapes: {e}")
    return args, asked or set(DEFAULT_OPS)


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """`"bs8x1M,bs64x128K"` -> ((8, 1 << 20), (64, 131072)); ValueError naming a bad item."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        m = re.fullmatch(r"bs(\d+)\s*x\s*(\d+)([KM])", item, re.IGNORECASE)
        if m is None or int(m[1]) < 1 or int(m[2]) < 1:
            raise ValueError(f"shape {item!r} is not bs<batch>x<context>K|M (e.g. bs8x1M)")
        out.append((int(m[1]), int(m[2]) << (10 if m[3].upper() == "K" else 20)))
    return tuple(out)


def pick_shapes(
    shapes: Sequence[tuple[int, int]] | None,
    quick: bool,
    quick_set: Sequence[tuple[int, int]],
    full_set: Sequence[tuple[int, int]],
) -> tuple[tuple[int, int], ...]:
    """The (batch, context) shapes a bench runs: `shapes` (from --shapes) when given, else its
    quick or full set."""
    if shapes:
        return tuple(shapes)
    return tuple(quick_set if quick else full_set)


def fits_device(what: str, need_bytes: int) -> bool:
    """Whether `need_bytes` fit the first device's allocator limit (True where the device does
    not say). A shape that does not fit is skipped with a line saying so, not run out of
    memory: e.g. the step's five layers of bs 64 x 1M caches on an 80 GB H100."""
    limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    if limit is None or need_bytes <= limit:
        return True
    print(
        f"bench: {what} skipped: needs about {need_bytes / 2**30:.0f} GiB, "
        f"the device's limit is {limit / 2**30:.0f} GiB",
        flush=True,
    )
    return False
