"""What the indexer adds to a model's decode step: `python -m benchmarks model`.

The step is examples/model_step.py's (one jit: 17 model layers of stand-in blocks, the five
indexer layers making their queries, writing their keys, selecting one layer at a time and
gathering the selected KV). Each variant runs its own state (caches donated, lengths
advancing) back to back, as a serving loop does; per step the bench reads the host wall (N
steps, one sync), and from CUPTI the GPU span (first kernel start to last kernel end, / N),
the kernel sum and the kernels of this library (names in its `dsv41` namespace or DeepGEMM's).

The indexer's marginal span is span(indexer) - span(fixed selection): the same model with
every layer reading fixed positions instead (queries still made and read, keys still written),
so the difference is what the selection costs the step, set beside the kernel time it adds
(kernel sum(indexer) - kernel sum(fixed selection)). Variants alternate in rounds and every
figure is the median of the rounds. Two stand-in weights: 48 MB a layer ("MoE-sized", the GPU
bounds the step) and 1 MB ("light", the host's dispatch does). The client is the process's:
run it again under `XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT=1` for the TFRT GPU client.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np

from benchmarks.args import fits_device
from benchmarks.table import Row
from benchmarks.timing import breakdown_line, interleaved_medians, profiled_events

MODEL_SHAPES_QUICK = ((1, 16384), (8, 131072))
MODEL_SHAPES = ((1, 16384), (8, 16384), (8, 131072), (64, 16384), (64, 131072), (8, 1 << 20))
WEIGHTS = {"MoE-sized": 48.0, "light": 1.0}
LIBRARY_KERNELS = ("dsv41", "deep_gemm")  # kernel-name marks of this library's kernels
STEPS, ROUNDS = 20, 5


def example() -> ModuleType:
    """examples/model_step.py of this checkout, imported (the bench runs from a checkout)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "model_step.py"
    if not path.exists():
        raise SystemExit(f"bench model runs examples/model_step.py of a checkout: no {path}")
    spec = importlib.util.spec_from_file_location("dsv41_model_step", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's names through it
    spec.loader.exec_module(module)
    return module


def client() -> str:
    """The process's GPU client, as its rows name it."""
    tfrt = os.environ.get("XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT", "") not in ("", "0")
    return "TFRT client" if tfrt else "PjRt client"


def bench_model(
    bw: float, shapes: Sequence[tuple[int, int]], breakdown: list[str] | None = None
) -> list[Row]:
    """Rows of the model step per (batch, context) of `shapes` and stand-in weight: its span,
    host wall and kernel sum with the indexer and with a fixed selection, the indexer's
    marginal span and the kernel time it adds."""
    import dsv41_jax as dj

    ms = example()
    cfg = dj.IndexerConfig()
    rows: list[Row] = []
    # Warm-up, the rounds' host walls and (every other round) spans, the breakdown.
    steps_needed = 3 + ROUNDS * STEPS + (ROUNDS + 1) // 2 * STEPS + 5
    for (bs, ctx), (weight, mb) in [(s, w) for s in shapes for w in WEIGHTS.items()]:
        shape = ms.ModelShape(block_mb=mb)
        cache_bytes = bs * ctx * 132
        kv_bytes = bs * ctx * shape.kv_dim * 2
        if not fits_device(f"model bs{bs} x {ctx // 1024}K", 2 * 5 * cache_bytes + kv_bytes):
            continue
        label = f"bs{bs} x {ctx // 1024}K"
        rng = np.random.default_rng(bs + ctx)
        params = ms.init_params(jax.random.key(1), shape, cfg)
        variants: dict[str, Any] = {}
        for name, fixed in (("indexer", False), ("fixed", True)):
            ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=(24, 28, 32, 36))
            state, kv, bt = ms.init_state(rng, cfg, shape, bs, ctx, steps_needed)
            step = jax.jit(
                lambda p, s, kv, bt, ix=ix, fixed=fixed: ms.decode_step(
                    ix, p, s, kv, bt, fixed_selection=fixed
                )[0],
                donate_argnums=1,
            )
            box = {"state": state}

            def one(step: Any = step, box: Any = box, kv: Any = kv, bt: Any = bt) -> object:
                box["state"] = step(params, box["state"], kv, bt)
                return box["state"].hidden

            variants[name] = one
        m = interleaved_medians(
            {name: (fn, False) for name, fn in variants.items()}, ROUNDS, STEPS, LIBRARY_KERNELS
        )

        if breakdown is not None:
            top = breakdown_line(profiled_events(variants["indexer"], 5), 5)
            breakdown.append(f"model {label} {weight}: {top}")
        index_floor = (bs * ctx * 132 + 4 * bs * cfg.candidate_positions * 132) / (bw * 1e3)
        impl = f"default, {weight} blocks, {client()}"
        fixed_impl = f"fixed selection (no indexer kernels), {weight} blocks, {client()}"
        for name, label_impl in (("indexer", impl), ("fixed", fixed_impl)):
            rows.append(Row("model step span", label, label_impl, m[name]["span"], 0.0))
            rows.append(Row("model step host wall", label, label_impl, m[name]["host"], 0.0))
            rows.append(Row("model step kernel sum", label, label_impl, m[name]["sum"], 0.0))
        marginal = m["indexer"]["span"] - m["fixed"]["span"]
        added = m["indexer"]["sum"] - m["fixed"]["sum"]
        rows.append(Row("indexer marginal span (model step)", label, impl, marginal, index_floor))
        rows.append(Row("indexer kernels (model step)", label, impl, added, index_floor))
        rows.append(
            Row(
                "indexer library kernels (model step)",
                label,
                impl,
                m["indexer"]["marked"] - m["fixed"]["marked"],
                index_floor,
            )
        )
        print(
            f"bench: model {label} {weight}: kernels/step indexer {m['indexer']['kernels']:.0f}, "
            f"fixed {m['fixed']['kernels']:.0f}; marginal span / added kernels "
            f"{marginal / max(added, 1e-9):.2f}",
            flush=True,
        )
        del variants
    return rows
