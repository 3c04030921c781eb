"""The GPU span of back-to-back calls on the extension in PYTHONPATH, for programmatic dependent
launch A/Bs: per call, the span (first kernel start to last kernel end over 50 calls, / 50),
the kernel sum and the kernel count, from CUPTI (`benchmarks.timing.interleaved_medians`:
medians over interleaved rounds). What it times: 16 short selects (k = 512 over [1, 16K], each
forced to the CUDA short select) in one jit, back to back on the stream: (span - sum) / kernels
is the gap a kernel boundary costs (a kernel that starts early and waits counts its wait in its
duration, so the span is the measure).

    python scripts/probes/pdl_span.py TAG   # once per build, interleaved

Prints a `SPAN TAG what shape span sum kernels` line; a `SAME` / `DIFF` line checks the chain
against the reference."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import interleaved_medians

tag = sys.argv[1]
rng = np.random.default_rng(0)


def report(what: str, shape: str, fn) -> None:
    m = interleaved_medians({what: (fn, False)})[what]
    print(
        f"SPAN {tag} {what} {shape} {m['span']:.1f} {m['sum']:.1f} {m['kernels']:.0f}", flush=True
    )


# 16 selects back to back
s = inputs.normal(rng, (1, 16384))
lens = jnp.full((1,), 16384 - 3, jnp.int32)


def chain(s, lens):
    return jnp.stack(
        [dj.topk(s + i, lens, 512, implementation="ffi", topk_algorithm="short") for i in range(16)]
    )


f = jax.jit(chain)
want = dj.topk(s, lens, 512, implementation="reference")
got = f(s, lens)
print("SAME" if all(bool((got[i] == want).all()) for i in range(16)) else "DIFF", tag, "chain")
report("chain", "[1, 16K]", lambda: f(s, lens))
