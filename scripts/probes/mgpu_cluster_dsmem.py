"""Probe: a cluster of 8 CTAs exchanging partial sums through distributed shared memory.

Ran on the H200 (run 1): correct under Lane lowering semantics; the Warpgroup semantics fails to
lower the scalar peer store (printed below)."""

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax._pallas import plgpu

S = jax.ShapeDtypeStruct
CL = 8
LANE = plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane)


def body(x_g, o_g, mine, acc, bar, cbar):
    c = jax.lax.axis_index("c")
    r = jax.lax.axis_index("r")
    plgpu.copy_gmem_to_smem(x_g.at[r, c], mine, bar)
    plgpu.barrier_wait(bar)
    v = plgpu.load(mine, layout=plgpu.Layout.WGMMA, optimized=False)
    part = jnp.sum(jnp.sum(v, axis=1))  # scalar per CTA
    acc[c] = part  # my partial, at my slot, in my own SMEM
    plgpu.commit_smem()
    # publish: write my partial into every peer's acc[c]
    for p in range(CL):
        peer = plgpu.cluster_ref(acc, {"c": p})
        peer[c] = part
    plgpu.barrier_arrive(cbar)
    plgpu.barrier_wait(cbar)
    tot = acc[0]
    for p in range(1, CL):
        tot = tot + acc[p]
    o_g[r, c] = tot


def build(semantics):
    return plgpu.kernel(
        body,
        out_type=S((2, CL), jnp.float32),
        scratch_types=[
            plgpu.SMEM((64, 128), jnp.float32),
            plgpu.SMEM((CL,), jnp.float32),
            plgpu.Barrier(num_arrivals=1),
            plgpu.ClusterBarrier(collective_axes=("c",), num_arrivals=1),
        ],
        grid=(2, CL),
        grid_names=("r", "c"),
        cluster=(CL,),
        cluster_names=("c",),
        compiler_params=semantics,
    )


x = np.random.default_rng(0).integers(0, 4, (2, CL, 64, 128)).astype(np.float32)
for name, sem in (("WG", None), ("LANE", LANE)):
    f = build(sem)
    try:
        if jax.default_backend() == "gpu":
            out = np.asarray(jax.jit(f)(jnp.asarray(x)))
            want = np.repeat(x.sum(axis=(1, 2, 3))[:, None], CL, 1)
            print(
                f"{'OK  ' if np.array_equal(out, want) else 'BAD '} cluster dsmem {name}: {out[:, :3]} want {want[:, 0]}",
                flush=True,
            )
        else:
            jax.jit(f).trace(S(x.shape, jnp.float32)).lower(lowering_platforms=("cuda",))
            print(f"OK   cluster dsmem {name} (lowered only)", flush=True)
    except Exception as e:
        print(
            f"FAIL cluster dsmem {name}: {type(e).__name__}: {' | '.join(str(e).strip().splitlines()[:2])[:300]}",
            flush=True,
        )
