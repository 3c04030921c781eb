"""Probe: does XLA (jax 0.11.2) put the V4.1 decode step into command buffers (CUDA graphs), and
does running the publish's block-selection chain on a second stream (`compute_on("gpu_stream:1")`)
shorten the step?

Each variant runs in its own process (XLA flags are read once). The child prints, for bs 8 × 128K:
a digest of the step's outputs, kernel busy time (CUPTI via torch.profiler), wall time per call of
50 pipelined calls, and what XLA logged about command buffers (TF_CPP_VMODULE) and dumped
(`--xla_dump_to`). Lines start with OK / BAD / TIME so device_check.sh shows them.

    python scripts/probes/step_capture_overlap.py
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile

CMD_ON = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
VARIANTS = {
    "off": ("--xla_gpu_enable_command_buffer=", "0"),
    "default": ("", "0"),
    "on": (CMD_ON, "0"),
    "overlap": ("--xla_gpu_enable_command_buffer=", "1"),
    "overlap+annot": (
        "--xla_gpu_enable_command_buffer= --xla_gpu_experimental_stream_annotation=true",
        "1",
    ),
    "on+overlap": (CMD_ON + " --xla_gpu_experimental_stream_annotation=true", "1"),
    # The chain without the Pallas kernel (XLA's block maxima, FFI top-C and sort), then
    # without any custom call: which op the second stream refuses.
    "overlap-no-pallas": ("--xla_gpu_enable_command_buffer=", "2"),
    "overlap-reference": ("--xla_gpu_enable_command_buffer=", "3"),
    # jax 0.11.2 cannot schedule a non-inlined nested jit (jnp.clip, ...) inside a stream-
    # annotated region (scripts/probes/compute_on_stream.py): the chain with every nested call
    # inlined into the region.
    "overlap-inlined": ("--xla_gpu_enable_command_buffer=", "4"),
    "default-cmdbuf+overlap-inlined": ("", "4"),
    "default-cmdbuf": ("", "0"),
}
ONLY = [v for v in os.environ.get("PROBE_VARIANTS", "").split(",") if v]
VMODULE = (
    "command_buffer_conversion_pass=3,command_buffer_thunk=3,command_buffer_cmd=2,"
    "command_buffer_cmd_emitter=2,custom_call_thunk=2"
)


def child(mode: str) -> None:
    import hashlib
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.compute_on import compute_on

    import dsv41_jax as dj
    from benchmarks import inputs
    from benchmarks.timing import jax_time_us
    from dsv41_jax import select_candidate_blocks
    from dsv41_jax.blocks import block_amax, sort_candidate_blocks
    from dsv41_jax.rows import row_block_table, row_lengths

    cfg = dj.IndexerConfig()
    layers = (20, 24, 28, 32, 36)
    rng = np.random.default_rng(0)
    caches, qs, lens, bt = inputs.decode_inputs(rng, jax.random.key(3), 8, 131072, layers=5)

    overlap = mode != "0"
    inline = mode == "4"
    impl = {"2": ("ffi", "reference"), "3": "reference"}.get(mode)

    def table_chain(logits, n, rbt):
        b = cfg.candidate_block_size
        s = block_amax(logits, n, block_size=b, implementation=impl)
        sel = select_candidate_blocks(
            s, n, num_candidates=cfg.candidate_topk_blocks, block_size=b, implementation=impl
        )
        return sort_candidate_blocks(
            sel, n, rbt, block_size=b, page_size=cfg.page_size, implementation=impl
        )

    def step(qs, caches, lens, bt):
        logits = dj.paged_mqa_logits(qs[0], caches[0], lens, bt)
        n = row_lengths(lens, 1)
        rbt = row_block_table(bt, 1)
        if overlap:
            table = compute_on(
                _inlined(table_chain) if inline else table_chain,
                compute_type="gpu_stream:1",
                out_memory_spaces=jax.memory.Space.Device,
            )(logits, n, rbt)
        else:
            table = table_chain(logits, n, rbt)
        top = dj.topk(logits, n, cfg.index_topk)
        sels = [dj.select(q, c, lens, bt, table, cfg) for q, c in zip(qs[1:], caches[1:])]
        return top, table, sels

    f = jax.jit(step)
    args = (qs, caches, lens, bt)
    out = jax.tree.leaves(f(*args))
    ref = jax.tree.leaves(jax.jit(lambda *a: _reference_step(dj, cfg, layers, *a))(*args))
    same = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(out, ref))
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in out)).hexdigest()[:16]
    print(f"RESULT equal_to_library_step {same} digest {digest}")
    busy = jax_time_us(step, [args], calls=10)
    jax.block_until_ready(f(*args))
    t0 = time.perf_counter()
    outs = [f(*args) for _ in range(50)]
    jax.block_until_ready(outs)
    wall = (time.perf_counter() - t0) / 50 * 1e6
    print(f"RESULT busy_us {busy:.1f} wall_us {wall:.1f}")
    hlo = f.lower(*args).compile().as_text()
    print(
        f"RESULT hlo_command_buffer {hlo.count('command_buffer')} "
        f"stream_annotation {hlo.count('_xla_stream_annotation')} "
        f"async_start {len(re.findall(r'call-start|async-start', hlo))}"
    )
    del jnp


def _inlined(f):
    """f with every nested jit call evaluated in place (its equations bound directly)."""
    import jax
    from jax.extend import core

    def run(jaxpr, consts, *args):
        env = {}

        def read(v):
            return v.val if isinstance(v, core.Literal) else env[v]

        env.update(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))
        for eqn in jaxpr.eqns:
            vals = [read(v) for v in eqn.invars]
            if eqn.primitive.name in ("pjit", "jit"):
                inner = eqn.params["jaxpr"]
                outs = run(inner.jaxpr, inner.consts, *vals)
            else:
                outs = eqn.primitive.bind(*vals, **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
            env.update(zip(eqn.outvars, outs))
        return [read(v) for v in jaxpr.outvars]

    def g(*args):
        closed, shape = jax.make_jaxpr(f, return_shape=True)(*args)
        out = run(closed.jaxpr, closed.consts, *jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shape), out)

    return g


def _reference_step(dj, cfg, layers, qs, caches, lens, bt):
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=layers[1:])
    r = ix.decode(dict(zip(layers, qs)), dict(zip(layers, caches)), lens, bt)
    return r.selections[20], r.table, [r.selections[x] for x in layers[1:]]


def parent() -> None:
    digests = {}
    for name, (flags, overlap) in VARIANTS.items():
        if ONLY and name not in ONLY:
            continue
        dump = tempfile.mkdtemp(prefix=f"xla_{name.replace('+', '_')}_")
        env = dict(
            os.environ,
            XLA_FLAGS=f"{flags} --xla_dump_to={dump}".strip(),
            TF_CPP_MIN_LOG_LEVEL="0",
            TF_CPP_VMODULE=VMODULE,
            PROBE_CHILD=overlap,
        )
        p = subprocess.run(
            [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=400
        )
        res = re.findall(r"RESULT (.*)", p.stdout)
        if p.returncode != 0:
            errs = [ln for ln in p.stderr.splitlines() if re.search(r"(?i)error|instantiate", ln)]
            print(f"BAD {name}: rc {p.returncode}: {' // '.join(errs[-8:])[-2500:]}")
            continue
        cb_logs = [ln for ln in p.stderr.splitlines() if re.search(r"(?i)command.?buffer", ln)]
        files = glob.glob(os.path.join(dump, "*"))
        thunk_files = [x for x in files if "thunk" in os.path.basename(x)]
        cb_in_dump = 0
        for x in files:
            try:
                cb_in_dump += open(x, errors="ignore").read().count("CommandBuffer")
            except (IsADirectoryError, OSError):
                pass
        print(f"TIME {name}: {' | '.join(res)}")
        print(
            f"OK {name}: {len(cb_logs)} command-buffer log lines; dump {len(files)} files, "
            f"{len(thunk_files)} thunk files, 'CommandBuffer' x{cb_in_dump}"
        )
        for ln in cb_logs[:6]:
            print(f"OK   log: {ln[-220:]}")
        for x in thunk_files[:3]:
            print(f"OK   thunk file: {os.path.basename(x)}")
        m = re.search(r"digest (\w+)", p.stdout)
        digests[name] = m.group(1) if m else None
    print(f"OK digests equal across variants: {len(set(digests.values())) <= 1} {digests}")


if __name__ == "__main__":
    if "PROBE_CHILD" in os.environ:
        child(os.environ["PROBE_CHILD"])
    else:
        parent()
