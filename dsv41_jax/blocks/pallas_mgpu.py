"""`implementation="pallas"` of block_amax: the SIMT program of `dsv41_jax.blocks.mgpu_amax` in a
Mosaic GPU kernel (`plgpu.kernel` of 1024 threads, a block a thread), any Hopper GPU.

What it takes: float32 scores, rows of any length, any block size; not ragged rows (`starts`).
`emulate=True` runs the same program on the CPU emulator (tests only: numpy in and out).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _mgpu
from dsv41_jax.blocks import mgpu_amax


def block_amax(scores, lengths, block_size, starts, pin_newest, *, emulate: bool = False):
    if not emulate:
        _mgpu.require_gpu("block_amax")
    if starts is not None:
        raise NotImplementedError("block_amax pallas: rows with starts (prefill) not supported")
    _mgpu.require_float32(scores, "block_amax")
    rows, n = scores.shape
    if rows * n >= 2**31:
        raise NotImplementedError("block_amax pallas: rows x columns must stay below 2^31")
    spec = mgpu_amax.AmaxSpec(n, block_size, pin_newest)
    if rows == 0 or n == 0:
        return jnp.full((rows, spec.row_blocks), -jnp.inf, jnp.float32)
    lengths = _checks.int32(lengths)
    if emulate:
        return mgpu_amax.emulate(spec, np.asarray(scores), np.asarray(lengths))
    return mgpu_amax.launch(spec, scores, lengths)
