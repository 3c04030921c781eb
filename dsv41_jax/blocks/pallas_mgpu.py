"""`implementation="pallas"` of block_amax: the SIMT program of `dsv41_jax.blocks.mgpu_amax` in a
Mosaic GPU kernel (`plgpu.kernel` of 1024 threads, a block a thread), any Hopper GPU.

What it takes (`supports`): float32 scores, rows of any length, any block size, ragged rows
(`starts`: the program reads each row shifted to its start, a copy `rows.shift_rows` makes
first, the reference's own shift). `emulate=True` runs the same program on the CPU emulator
(tests only: numpy in and out).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks
from dsv41_jax._device import Device, device_record
from dsv41_jax.blocks import mgpu_amax
from dsv41_jax.rows import shift_rows


def supports(
    device: Device,
    scores: jax.Array,
    lengths: jax.Array,
    block_size: int,
    starts: jax.Array | None,
    pin_newest: bool,
) -> str | None:
    """Why the Mosaic GPU kernel cannot take these inputs on `device` (None: it can)."""
    if device.backend != "gpu":
        return "block_amax pallas: the Mosaic GPU kernel needs a CUDA GPU backend"
    return _input_declines(scores)


def _input_declines(scores: jax.Array) -> str | None:
    """Why the program (on a GPU or its emulator) cannot take these inputs (None: it can)."""
    if scores.dtype != jnp.float32:
        return f"block_amax pallas: float32 scores only (got {scores.dtype})"
    rows, n = scores.shape
    if rows * n >= 2**31:
        return "block_amax pallas: rows x columns must stay below 2^31"
    return None


def block_amax(scores, lengths, block_size, starts, pin_newest, *, emulate: bool = False):
    # The emulator runs on any backend: only the inputs are checked for it.
    why = (
        _input_declines(scores)
        if emulate
        else supports(device_record(), scores, lengths, block_size, starts, pin_newest)
    )
    if why is not None:
        raise NotImplementedError(why)
    rows, n = scores.shape
    spec = mgpu_amax.AmaxSpec(n, block_size, pin_newest)
    if rows == 0 or n == 0:
        return jnp.full((rows, spec.row_blocks), -jnp.inf, jnp.float32)
    if starts is not None:  # block b covers positions [b·B, (b+1)·B) after the row's start
        scores, lengths = shift_rows(jnp.asarray(scores), starts, jnp.asarray(lengths))
    lengths = _checks.int32(lengths)
    if emulate:
        return mgpu_amax.emulate(spec, np.asarray(scores), np.asarray(lengths))
    return mgpu_amax.launch(spec, scores, lengths)
