"""What a jitted function's signature costs the host per call, whatever its body: jits of one
tiny fusion with N array inputs and M array outputs, flat or as the decode step's pytrees
(dicts of QueryBundle / PagedIndexCache in, StepResult out), beside the step itself. Medians of
interleaved rounds, host wall per call over 50 back-to-back calls with outputs dropped.

    python scripts/probes/signature_cost.py
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import host_wall_us

LAYERS = (20, 24, 28, 32, 36)


def same_signature(step, *args):
    """A jit with `step`'s inputs and outputs (every input kept, outputs of the same pytree,
    shapes and dtypes) whose body is one small fusion: the host floor PjRt and the output
    pytree set for that signature, which any step with these arguments pays."""
    shapes = jax.eval_shape(step, *args)

    def body(*a):
        lens = jax.tree.leaves(a)[-2]  # context_lens
        return jax.tree.map(lambda s: jnp.broadcast_to(lens[0].astype(s.dtype), s.shape), shapes)

    return jax.jit(body, keep_unused=True)


def main() -> None:
    x = jnp.ones((8, 512), jnp.int32)
    variants = {}
    for n_in in (1, 5, 9, 17, 33):
        xs = [x + i for i in range(n_in)]
        f = jax.jit(lambda *a: a[0] + 1, keep_unused=True)
        variants[f"{n_in:2d} in,  1 out"] = lambda f=f, xs=xs: f(*xs)
    for n_out in (5, 9, 17):
        f = jax.jit(lambda a, n=n_out: tuple(a + i for i in range(n)))
        variants[f" 1 in, {n_out:2d} out"] = lambda f=f: f(x)
    caches, qs, lens, bt = inputs.decode_inputs(
        np.random.default_rng(0),
        jax.random.key(7),
        1,
        16384,
        layers=5,
    )
    qd, cd = dict(zip(LAYERS, qs)), dict(zip(LAYERS, caches))
    ix = dj.make_two_level_indexer(dj.IndexerConfig(), source_layer=20, consumer_layers=LAYERS[1:])
    step = jax.jit(lambda *a: ix.decode(*a))
    sig = same_signature(step, qd, cd, lens, bt)
    flat_in = jax.tree.leaves((qd, cd, lens, bt))
    flat = jax.jit(
        lambda *a: tuple(
            jax.tree.leaves(sig(*jax.tree.unflatten(jax.tree.structure((qd, cd, lens, bt)), a)))
        ),
        keep_unused=True,
    )
    variants["step signature, pytrees"] = lambda: sig(qd, cd, lens, bt)
    variants["step signature, flat arrays"] = lambda: flat(*flat_in)
    variants["the step (bs 1 x 16K)"] = lambda: step(qd, cd, lens, bt)
    for fn in variants.values():
        for _ in range(5):
            jax.block_until_ready(fn())
    got = {name: [] for name in variants}
    for _ in range(7):
        for name, fn in variants.items():
            got[name].append(host_wall_us(fn, 50))
    for name, v in got.items():
        print(f"{name:32s} host µs/call {statistics.median(v):7.1f}  (min {min(v):.1f})")


if __name__ == "__main__":
    main()
