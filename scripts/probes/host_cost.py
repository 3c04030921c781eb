"""Where a serving loop's time goes: for each call, kernels per call, kernel sum, GPU span per call
over N back-to-back calls (first kernel start to last kernel end, / N), and host wall per call
(N calls, one sync) with the outputs of every call kept alive ("kept") or dropped as a loop
would ("dropped"). Rows: a trivial jit, chains of N custom calls and of N XLA kernels, and the
library's ops and step. Runs under this process's XLA_FLAGS; `--vlog` instead counts XLA's
command-buffer updates per execution; `--trace` prints host time per thunk from a jax.profiler
trace (XLA runs thunks one by one while that profiler is on).

    python scripts/probes/host_cost.py [--rows micro,ops,step] [--shapes 1x16384,8x131072]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import host_wall_us
from dsv41_jax import _ext

LAYERS = (20, 24, 28, 32, 36)
CFG = dj.IndexerConfig()


def gpu_events(fn, n):
    """CUPTI kernel/memcpy/memset events of `fn()` run `n` times back to back (outputs kept)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        outs = [fn() for _ in range(n)]
        jax.block_until_ready(outs)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        ev = json.load(open(f.name))["traceEvents"]
    return [
        e
        for e in ev
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]


def measure_gpu(fn, n=50):
    """{kernels, sum, span} per call (µs), from one profiled run of `n` back-to-back calls."""
    k = gpu_events(fn, n)
    span = (max(e["ts"] + e["dur"] for e in k) - min(e["ts"] for e in k)) / n if k else 0.0
    return dict(kernels=len(k) / n, sum=sum(e["dur"] for e in k) / n, span=span)


def measure_host(fn, n=50):
    for _ in range(3):
        jax.block_until_ready(fn())
    return dict(kept=host_wall_us(fn, n, True), dropped=host_wall_us(fn, n, False))


def micro_rows():
    """name -> zero-argument callable: a trivial jit, N chained custom calls (a tiny page
    transform each), N chained XLA kernels (kept apart by optimization barriers)."""
    _ext.register_ffi_targets()
    x = jnp.ones((8, 16384), jnp.float32)
    idx = jnp.asarray(np.random.default_rng(0).integers(0, 512, (8, 512)).astype(np.int32))
    bt = jnp.asarray(np.tile(np.arange(8, dtype=np.int32), (8, 1)))
    call = jax.ffi.ffi_call("dsv41_logical_to_physical", jax.ShapeDtypeStruct(idx.shape, jnp.int32))

    def ffi_chain(n):
        def f(i, b):
            for _ in range(n):
                i = call(i, b, page_size=np.int32(64))
            return i

        g = jax.jit(f)
        return lambda: g(idx, bt)

    def xla_chain(n):
        def f(v):
            for _ in range(n):
                v = jax.lax.optimization_barrier(v * 1.0001 + 1.0)
            return v

        g = jax.jit(f)
        return lambda: g(x)

    def fan(n, one, arg):
        g = jax.jit(lambda a: [one(a, i) for i in range(n)])
        return lambda: g(arg)

    sc = jnp.asarray(np.random.default_rng(2).standard_normal((8, 16384)).astype(np.float32))
    lens = jnp.full((8,), 16384, jnp.int32)
    trivial = jax.jit(lambda v: v + 1)
    rows = {"jit(x + 1) [8, 16K]": lambda: trivial(x)}
    for n in (1, 4, 16):
        rows[f"{n} chained custom calls"] = ffi_chain(n)
    for n in (4, 16):
        rows[f"{n} chained XLA kernels"] = xla_chain(n)
    # Five independent calls, five outputs: what updating one command of each kind costs.
    rows["5 topk -> 5 outputs"] = fan(5, lambda a, i: dj.topk(a + i, lens, 512), sc)
    rows["5 page transforms -> 5 outputs"] = fan(
        5, lambda a, i: call(a + i, bt, page_size=np.int32(64)), idx
    )
    rows["5 XLA kernels -> 5 outputs"] = fan(5, lambda a, i: jnp.sin(a + i), x)
    return rows


def step_inputs(bs, ctx):
    rng = np.random.default_rng(0)
    caches, qs, lens, bt = inputs.decode_inputs(rng, jax.random.key(bs + ctx), bs, ctx, layers=5)
    return caches, qs, lens, bt


def op_rows(bs, ctx, which):
    caches, qs, lens, bt = step_inputs(bs, ctx)
    s = f"bs{bs} x {ctx // 1024}K"
    rows = {}
    if "ops" in which:
        sc = jnp.asarray(np.random.default_rng(1).standard_normal((bs, ctx)).astype(np.float32))
        topk = jax.jit(lambda v, n: dj.topk(v, n, 512))
        rows[f"topk [{bs}, {ctx // 1024}K]"] = lambda: topk(sc, lens)
        logits = jax.jit(dj.paged_mqa_logits)
        rows[f"paged_mqa_logits {s}"] = lambda: logits(qs[0], caches[0], lens, bt)
        pub = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, CFG))
        rows[f"publish {s}"] = lambda: pub(qs[0], caches[0], lens, bt)
        _, table = pub(qs[0], caches[0], lens, bt)
        sel = jax.jit(lambda *a: dj.select(*a, CFG))
        rows[f"select (auto) {s}"] = lambda: sel(qs[1], caches[1], lens, bt, table)
    if "step" in which:
        ix = dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=LAYERS[1:])
        qd, cd = dict(zip(LAYERS, qs)), dict(zip(LAYERS, caches))
        step = jax.jit(lambda *a: ix.decode(*a))
        rows[f"step {s}"] = lambda: step(qd, cd, lens, bt)
        # The same arrays as a flat list: what building the StepResult pytree costs.
        step_l = jax.jit(lambda *a: jax.tree.leaves(ix.decode(*a)))
        rows[f"step {s}, flat outputs"] = lambda: step_l(qd, cd, lens, bt)
        # The outputs written by one XLA fusion instead of the custom calls themselves.
        int_max = lambda x: jnp.maximum(x, -1) if x.dtype == jnp.int32 else x  # noqa: E731
        step_f = jax.jit(lambda *a: jax.tree.map(int_max, ix.decode(*a)))
        rows[f"step {s}, outputs via a fusion"] = lambda: step_f(qd, cd, lens, bt)
        # Fresh-looking inputs: three sets of queries and lengths, rotated call by call.
        sets = []
        for j in range(3):
            qj = {layer: inputs.query(np.random.default_rng(j), bs, 1, 32, 128) for layer in LAYERS}
            sets.append((qj, cd, lens + 0 * j, bt + 0 * j))
        it = iter(range(1 << 30))
        rows[f"step {s}, 3 input sets rotated"] = lambda: step(*sets[next(it) % 3])
    return rows


def run_rows(rows, rounds):
    res = {name: [] for name in rows}
    for _ in range(rounds):  # interleaved: every row once per round
        for name, fn in rows.items():
            res[name].append(measure_host(fn))
    gpu = {name: measure_gpu(fn) for name, fn in rows.items()}
    tag = os.environ.get("XLA_FLAGS", "") or "defaults"
    for name, ms in res.items():
        med = {key: statistics.median(m[key] for m in ms) for key in ms[0]} | gpu[name]
        lo = min(m["kept"] for m in ms)
        hi = max(m["kept"] for m in ms)
        print(
            f"ROW | {tag} | {name} | {med['kernels']:.0f} | {med['sum']:.1f} | {med['span']:.1f} "
            f"| {med['kept']:.1f} ({lo:.0f}-{hi:.0f}) | {med['dropped']:.1f} |",
            flush=True,
        )


def vlog(rows):
    """Per row: command-buffer updates and executions per call, and the update times XLA logs
    (run with TF_CPP_VMODULE=command_buffer_thunk=3)."""
    for name, fn in rows.items():
        for keep in (True, False):
            for _ in range(3):
                jax.block_until_ready(fn())
            print(f"== start {name} keep={keep}", file=sys.stderr, flush=True)
            host_wall_us(fn, 20, keep)
            print(f"== end {name} keep={keep}", file=sys.stderr, flush=True)


def parse_vlog_detail(text):
    """Which commands XLA updates per call (TF_CPP_VMODULE=command_executor=3)."""
    for m in re.finditer(r"== start (.*?) keep=(\w+)\n(.*?)== end", text, re.S):
        body = m.group(3)
        upd = re.findall(r"Updated (\d+) commands in (\d+) .s \(skipped (\d+)", body)
        if not upd:
            continue
        n = len(upd)
        total = statistics.median(int(u[0]) for u in upd)
        us = statistics.median(int(u[1]) for u in upd)
        skipped = statistics.median(int(u[2]) for u in upd)
        print(
            f"UPDATE | {m.group(1)} | keep={m.group(2)} | updates {n}/20 calls | commands "
            f"{total:.0f} | updated {total - skipped:.0f} | {us} µs",
            flush=True,
        )


def parse_vlog(text):
    for m in re.finditer(r"== start (.*?) keep=(\w+)\n(.*?)== end", text, re.S):
        body = m.group(3)
        ups = [int(u) for u in re.findall(r"Updated command buffer in (\d+)", body)]
        ex = len(re.findall(r"Execute command buffer on device", body))
        print(
            f"VLOG | {m.group(1)} | keep={m.group(2)} | executions/call {ex / 20:.1f} | "
            f"updates/call {len(ups) / 20:.1f} | update µs median "
            f"{statistics.median(ups) if ups else 0} | sum/call {sum(ups) / 20:.0f}",
            flush=True,
        )


def trace(rows, n=10):
    """Host time per thunk name from a jax.profiler trace (thunks run one by one under it)."""
    for name, fn in rows.items():
        for _ in range(3):
            jax.block_until_ready(fn())
        d = tempfile.mkdtemp()
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(n):
                jax.block_until_ready(fn())
        path = glob.glob(f"{d}/**/perfetto_trace.json.gz", recursive=True)[0]
        ev = json.load(gzip.open(path))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        names = {
            e["pid"]: e["args"]["name"]
            for e in ev
            if e.get("ph") == "M" and e.get("name") == "process_name"
        }
        agg = {}
        for e in ev:
            if e.get("ph") != "X" or "device:GPU" in names.get(e.get("pid"), ""):
                continue
            key = re.sub(r"\.\d+$", ".N", e["name"])[:80]
            c, t = agg.get(key, (0, 0.0))
            agg[key] = (c + 1, t + e.get("dur", 0))
        print(f"TRACE {name}: host events per call (count, µs)", flush=True)
        for key, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
            print(f"TRACE | {name} | {key} | {c / n:.1f} | {t / n:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="micro,ops,step")
    ap.add_argument("--shapes", default="1x16384,8x131072")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vlog", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--parse-vlog", help="a --vlog run's stderr: print its summary and exit")
    a = ap.parse_args()
    if a.parse_vlog:
        text = open(a.parse_vlog).read()
        parse_vlog(text)
        return parse_vlog_detail(text)
    which = a.rows.split(",")
    rows = micro_rows() if "micro" in which else {}
    for shape in a.shapes.split(","):
        bs, ctx = (int(v) for v in shape.split("x"))
        rows.update(op_rows(bs, ctx, which))
    if a.vlog:
        vlog(rows)
    elif a.trace:
        trace(rows)
    else:
        print(
            "ROW | flags | call | kernels | kernel sum µs | GPU span µs | host kept µs (min-max) "
            "| host dropped µs |"
        )
        run_rows(rows, a.rounds)


if __name__ == "__main__":
    main()
