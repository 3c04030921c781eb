"""What a serving loop sees: `python -m dsv41_jax.bench loop` (part of the default run).

A loop issues the jitted step back to back and drops each call's outputs when it issues the
next (`out = step(...)`). Per call it pays the host's dispatch (the host wall: N calls, one
sync, / N) and the GPU's span (first kernel start to last kernel end over those N calls, / N,
read from CUPTI through torch.profiler): the span is the kernel sum when the GPU never waits
for the host, and the host wall when it does. Every row is the median of interleaved rounds
(variants alternate, so the shared host's noise falls on all of them), beside a trivial jit's
host wall of the same rounds. The same loop with every call's outputs kept alive (fresh output
buffers on every call) is the worst case for XLA's command buffers and is reported too.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import jax
import jax.numpy as jnp

from dsv41_jax import _ext, testing
from dsv41_jax.bench.table import Row
from dsv41_jax.bench.timing import gpu_span_us, host_wall_us

LAYERS = (20, 24, 28, 32, 36)
# The step's variants the loop times: name -> its `TwoLevelIndexer.step_mode`, and name -> the
# row's label.
STEP_VARIANTS = {
    "step": "graphs",
    "step one call direct": "direct",
    "step one call traced": "traced",
    "step a call a layer": "layers",
}
STEP_LABELS = {
    "step": "auto path (default)",
    "step, stacked selections": "decode_stacked (one output array)",
    "step one call direct": "one call, direct launches",
    "step one call traced": "one call, XLA-captured",
    "step a call a layer": "a call a layer",
    "step op by op": "op by op",
    "step, outputs kept": "auto path (default), outputs kept",
    "step one call direct, outputs kept": "one call, direct launches, outputs kept",
}
LOOP_SHAPES_QUICK = ((1, 16384), (8, 16384), (8, 131072))
LOOP_SHAPES = (*LOOP_SHAPES_QUICK, (64, 131072), (8, 1 << 20))


def measure(
    variants: dict[str, tuple[Callable[[], object], bool]],
    rounds: int = 5,
    calls: int = 50,
) -> dict[str, dict[str, float]]:
    """Medians over interleaved rounds: host wall every round, GPU span every other round.
    `variants`: name -> (zero-argument call, keep every call's outputs alive)."""
    for fn, _ in variants.values():
        for _ in range(3):
            jax.block_until_ready(fn())
    host: dict[str, list[float]] = {name: [] for name in variants}
    gpu: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, (fn, keep) in variants.items():
            host[name].append(host_wall_us(fn, calls, keep))
            if r % 2 == 0:
                gpu[name].append(gpu_span_us(fn, calls, keep))
    return {
        name: dict(
            host=statistics.median(host[name]),
            **{key: statistics.median(g[key] for g in gpu[name]) for key in gpu[name][0]},
        )
        for name in variants
    }


def same_signature(step: Callable, *args: object) -> Callable:
    """A jit with `step`'s inputs and outputs (every input kept, outputs of the same pytree,
    shapes and dtypes) whose body is one small fusion: the host floor PjRt and the output
    pytree set for that signature, which any step with these arguments pays."""
    shapes = jax.eval_shape(step, *args)

    def body(*a: object) -> object:
        lens = jax.tree.leaves(a)[-2]  # context_lens
        return jax.tree.map(lambda s: jnp.broadcast_to(lens[0].astype(s.dtype), s.shape), shapes)

    return jax.jit(body, keep_unused=True)


def bench_loop(rng, bw: float, shapes) -> list[Row]:
    """Span, host wall and kernel sum of the decode step (fused layers and op by op), publish and
    one select, with a trivial jit's host wall of the same rounds, per (batch, context) of
    `shapes` (LOOP_SHAPES_QUICK / LOOP_SHAPES unless --shapes names others)."""
    import dsv41_jax as dj

    cfg = dj.IndexerConfig()
    rows = []
    x = jnp.ones((8, 16384), jnp.float32)
    trivial = jax.jit(lambda v: v + 1)
    for bs, ctx in shapes:
        caches, qs, lens, bt = testing.decode_inputs(
            rng, jax.random.key(7 + bs + ctx), bs, ctx, layers=5
        )
        shape = f"bs{bs} x {ctx // 1024}K"
        floor = (bs * ctx * 132 + 4 * bs * cfg.candidate_positions * 132) / (bw * 1e3)
        qd, cd = dict(zip(LAYERS, qs)), dict(zip(LAYERS, caches))
        steps = {}
        for mode in ("graphs", "direct", "traced", "layers", "ops"):
            ix = dj.make_two_level_indexer(
                cfg, source_layer=20, consumer_layers=LAYERS[1:], step_mode=mode
            )
            steps[mode] = jax.jit(lambda *a, ix=ix: ix.decode(*a))
            jax.block_until_ready(steps[mode](qd, cd, lens, bt))
        op_by_op = steps.pop("ops")
        ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=LAYERS[1:])
        stacked = jax.jit(ix.decode_stacked)
        signature = same_signature(steps["graphs"], qd, cd, lens, bt)
        signature_stacked = same_signature(stacked, qd, cd, lens, bt)
        publish = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))
        _, table = publish(qs[0], caches[0], lens, bt)
        select = jax.jit(lambda q, c, n, b, t: dj.select(q, c, n, b, t, cfg))
        variants = {
            name: (lambda f=steps[mode]: f(qd, cd, lens, bt), False)
            for name, mode in STEP_VARIANTS.items()
        }
        variants |= {
            "step, stacked selections": (lambda: stacked(qd, cd, lens, bt), False),
            "step op by op": (lambda: op_by_op(qd, cd, lens, bt), False),
            "step, outputs kept": (lambda: steps["graphs"](qd, cd, lens, bt), True),
            "step one call direct, outputs kept": (
                lambda: steps["direct"](qd, cd, lens, bt),
                True,
            ),
            "publish": (lambda: publish(qs[0], caches[0], lens, bt), False),
            "select": (lambda: select(qs[1], caches[1], lens, bt, table), False),
            "signature": (lambda: signature(qd, cd, lens, bt), False),
            "signature stacked": (lambda: signature_stacked(qd, cd, lens, bt), False),
            "trivial": (lambda: trivial(x), False),
        }
        hits0, misses0 = _ext.decode_step_graph_stats()
        m = measure(variants)
        hits, misses = _ext.decode_step_graph_stats()
        auto = "auto path (default)"
        for name, label in STEP_LABELS.items():
            rows.append(Row("decode step span (pipelined)", shape, label, m[name]["span"], floor))
            rows.append(Row("decode step host wall", shape, label, m[name]["host"], 0.0))
            rows.append(
                Row("decode step kernel sum (same loop)", shape, label, m[name]["sum"], floor)
            )
        for name, op in (("publish", "publish (layer 20)"), ("select", "select (consumer layer)")):
            rows.append(Row(f"{op} span (pipelined)", shape, auto, m[name]["span"], 0.0))
            rows.append(Row(f"{op} host wall", shape, auto, m[name]["host"], 0.0))
        for name, what in (("signature", "decode's"), ("signature stacked", "decode_stacked's")):
            label = f"{what} inputs and outputs, one fusion"
            rows.append(Row("same-signature jit host wall", shape, label, m[name]["host"], 0.0))
        trivial_host = m["trivial"]["host"]
        rows.append(Row("trivial jit host wall", shape, "jit(x + 1) [8, 16K]", trivial_host, 0.0))
        print(
            f"bench: loop {shape}: kernels/call step {m['step']['kernels']:.0f}, op by op "
            f"{m['step op by op']['kernels']:.0f}; host − trivial jit "
            + ", ".join(f"{n} {m[n]['host'] - m['trivial']['host']:.0f}" for n in STEP_LABELS)
            + "; same-signature jits − trivial "
            + ", ".join(
                f"{n} {m[n]['host'] - m['trivial']['host']:.0f}"
                for n in ("signature", "signature stacked")
            ),
            flush=True,
        )
        print(
            f"bench: loop {shape}: the step's graph cache over these rounds: "
            f"{hits - hits0} hits, {misses - misses0} misses",
            flush=True,
        )
    return rows
