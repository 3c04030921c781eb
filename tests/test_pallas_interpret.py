"""The Pallas block amax in interpret mode on the CPU (race detection on): CI's view of the
kernel. Interpret mode is not proof (it accepts code the GPU lowering rejects): the same kernel
also lowers for CUDA here, and runs on the H200 in tests/test_gpu_pallas.py. (The Pallas
selection kernels are one implementation among the others in test_topk.py and
test_candidate_blocks.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import scores as make_scores

from dsv41_jax.blocks import pallas_mgpu, reference


def finished(x):
    """Interpret mode runs the kernel's callbacks on another thread, and they dispatch jax ops:
    starting the next computation (the reference) before they finish can deadlock the CPU client."""
    return jax.block_until_ready(x)


@pytest.mark.parametrize("kind", ["random", "special"])
@pytest.mark.parametrize("rows,n", [(2, 2048), (3, 2560), (1, 1536)])
def test_block_amax_interpret_equals_reference(rng, kind, rows, n):
    s = jnp.asarray(make_scores(rng, rows, n, kind))
    lens = jnp.asarray(rng.integers(0, n + 1, rows).astype(np.int32)).at[0].set(n)
    for pin in (True, False):
        got = finished(pallas_mgpu.block_amax(s, lens, 8, None, pin, interpret=True))
        want = reference.block_amax(s, lens, 8, None, pin)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_block_amax_lowers_for_cuda():
    """The GPU lowering (stricter than interpret mode) accepts the kernel at V4.1 shapes."""
    cfg = pallas_mgpu.BlockAmaxConfig()
    f = jax.jit(lambda s, n: pallas_mgpu._block_amax(s, n, cfg=cfg, pin=True))
    args = (
        jax.ShapeDtypeStruct((64, 1 << 20), jnp.float32),
        jax.ShapeDtypeStruct((64,), jnp.int32),
    )
    text = f.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "mosaic_gpu" in text


def test_block_amax_pallas_refuses_what_it_cannot_do():
    s, n = jnp.zeros((2, 20)), jnp.zeros((2,), jnp.int32)
    with pytest.raises(NotImplementedError, match="multiple of 512"):
        pallas_mgpu.block_amax(s, n, 8, None, True, interpret=True)
    with pytest.raises(NotImplementedError, match="multiple of 512"):
        pallas_mgpu.block_amax(jnp.zeros((2, 4104)), n, 8, None, True, interpret=True)
    with pytest.raises(NotImplementedError, match="starts"):
        pallas_mgpu.block_amax(jnp.zeros((2, 16)), n, 8, n, True, interpret=True)
