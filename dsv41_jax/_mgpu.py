"""What the Pallas Mosaic GPU kernels share: the GPU gate, the whole-tile rule, interpret mode."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas import mosaic_gpu as plgpu

from dsv41_jax import _ext

TILES = (256, 128, 64)  # rows of one TMA box (both box dims must stay <= 256)


def require_gpu(op: str, interpret: bool) -> None:
    """Decline (NotImplementedError) off the GPU unless the kernel runs in interpret mode."""
    if not interpret and _ext.backend() != "gpu":
        raise NotImplementedError(f"{op} pallas: the Mosaic GPU kernel needs a CUDA GPU backend")


def require_float32(x: jax.Array, op: str) -> None:
    if x.dtype != jnp.float32:
        raise NotImplementedError(f"{op} pallas: float32 scores only (got {x.dtype})")


def whole_tile(num_groups: int) -> int | None:
    """The largest tile (in groups of a row) that divides the row, or None. Whole tiles only: a
    partially out-of-bounds TMA tile read wrong data on the H200 (interpret mode accepted it)."""
    return next((t for t in TILES if num_groups % t == 0), None)


def interpret_params(interpret: bool):
    return plgpu.InterpretGPUParams() if interpret else None
