"""Minimal Mosaic GPU repro: why the exact top-k is not a Pallas kernel (BENCHMARKS_HISTORY.md).

Mosaic GPU offers no scatter, histogram or atomic at a data-dependent index, so an exact k-th
key must be found by counting: `jnp.sum(jnp.where(keys >= t, 1, 0), axis=1)` per threshold over
tiles loaded in the WGMMA layout. This times that building block on 128 CTAs of 16K keys: run 1
on the H200 gave 11.2 us for one 15-threshold pass and 97 us for the 8 passes that resolve 32
key bits, in both lowering semantics. `python scripts/probes/mgpu_counting_cost.py` on a GPU."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.timing import jax_time_us
from dsv41_jax._pallas import plgpu

S = jax.ShapeDtypeStruct
LANE = plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane)


def make(M, passes, tiles, sem, nthreads):
    def body(x_g, o_g, tile, res, bar):
        c = jax.lax.axis_index("c")

        def one_pass(p, carry):
            def one_tile(t, accs):
                plgpu.copy_gmem_to_smem(x_g.at[c, t], tile, bar)
                plgpu.barrier_wait(bar)
                v = plgpu.load(tile, layout=plgpu.Layout.WGMMA, optimized=False)
                b = jax.lax.bitcast_convert_type(v, jnp.int32)
                k = jnp.where(b >= 0, b, b ^ 0x7FFFFFFF)
                return tuple(
                    a + jnp.sum(jnp.where(k >= (j * 1000 + p), 1, 0), axis=1)
                    for j, a in enumerate(accs)
                )

            accs = jax.lax.fori_loop(
                0,
                tiles,
                one_tile,
                tuple(
                    plgpu.layout_cast(jnp.zeros((64,), jnp.int32), plgpu.Layout.WGMMA.reduce(1))
                    for _ in range(M)
                ),
            )
            return carry + sum(jnp.sum(a) for a in accs)

        tot = jax.lax.fori_loop(0, passes, one_pass, jnp.int32(0))
        o_g[c] = tot

    return plgpu.kernel(
        body,
        out_type=S((128,), jnp.int32),
        scratch_types=[
            plgpu.SMEM((64, 256), jnp.float32),
            plgpu.SMEM((8,), jnp.int32),
            plgpu.Barrier(num_arrivals=1),
        ],
        grid=(128,),
        grid_names=("c",),
        compiler_params=sem,
    )


rng = np.random.default_rng(0)
for sem_name, sem in (("WG", None), ("LANE", LANE)):
    for M, passes, tiles in ((15, 1, 1), (15, 8, 1), (7, 11, 1), (15, 8, 4), (3, 16, 1)):
        x = jnp.asarray(rng.standard_normal((128, tiles, 64, 256)).astype(np.float32))
        try:
            f = make(M, passes, tiles, sem, 1)
            out = jax.jit(f)(x).block_until_ready()
            t = jax_time_us(f, [(x,)], calls=10)
            print(
                f"TIME count {sem_name} M={M} passes={passes} tiles/CTA={tiles} (16K elems/tile, 128 CTAs): {t:.1f} us",
                flush=True,
            )
        except Exception as e:
            print(
                f"FAIL count {sem_name} M={M}: {type(e).__name__}: {' | '.join(str(e).strip().splitlines()[:2])[:300]}",
                flush=True,
            )
