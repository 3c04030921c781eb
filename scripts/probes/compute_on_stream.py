"""Probe: which programs jax 0.11.2's `compute_on("gpu_stream:1")` compiles on the GPU.

The decode step's block-selection chain on a second stream failed to compile ("No
ExecutionStreamId found for call-start ... only reachable through embedded calls"); the failing
instruction was a `jnp.clip` (a jitted jnp function) inside the annotated region. Variants: plain
jnp ops, one nested jit, one FFI custom call. Prints OK/BAD per variant.
"""

import jax
import jax.numpy as jnp
from jax.experimental.compute_on import compute_on

import dsv41_jax as dj


def side(f):
    return compute_on(f, compute_type="gpu_stream:1", out_memory_spaces=jax.memory.Space.Device)


x = jnp.arange(8 * 4096, dtype=jnp.float32).reshape(8, 4096)
bt = jnp.arange(8 * 64, dtype=jnp.int32).reshape(8, 64)
idx = jnp.tile(jnp.arange(512, dtype=jnp.int32), (8, 1))
VARIANTS = {
    "plain jnp ops": lambda a: (a * 2.0 + 1.0).max(axis=1),
    "nested jit (jnp.clip)": lambda a: jnp.clip(a, 0.0, 10.0).max(axis=1),
    "nested jax.jit(inline=True)": lambda a: jax.jit(lambda b: b * 3.0, inline=True)(a).max(1),
    "FFI custom call": lambda a: (
        dj.logical_to_physical(idx, bt, 64, implementation="ffi").sum(1) + a[:, 0]
    ),
}
for name, fn in VARIANTS.items():
    try:
        f = jax.jit(lambda a, fn=fn: side(fn)(a) + a.sum(axis=1))
        want = jax.jit(lambda a, fn=fn: fn(a) + a.sum(axis=1))(x)
        got = f(x)
        same = bool(jnp.array_equal(got, want))
        hlo = f.lower(x).compile().as_text()
        print(
            f"OK {name}: compiled and ran, equal {same}, "
            f"stream annotations in compiled HLO {hlo.count('_xla_stream_annotation')}"
        )
    except Exception as e:  # noqa: BLE001 - the probe reports every failure
        print(f"BAD {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
