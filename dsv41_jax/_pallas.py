"""Pallas Mosaic GPU and Mosaic GPU's MLIR utilities, from where the installed jax keeps them.

jax 0.12 has Pallas at `jax.pallas` (Mosaic GPU: `jax.pallas.mosaic_gpu`) and keeps
`jax.experimental.pallas` as an alias; jax 0.11.2 has only `jax.experimental.pallas`. Every
module of dsv41_jax (and its tests and probes) imports them from here, so the same code runs on
both. Mosaic GPU's MLIR utilities are at `jax.experimental.mosaic.gpu.utils` in both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

try:
    from jax.pallas import mosaic_gpu as plgpu  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # jax 0.11
    from jax.experimental.pallas import mosaic_gpu as plgpu  # type: ignore[no-redef, unused-ignore]

from jax.experimental.mosaic.gpu import utils as mosaic_utils

__all__ = ["mosaic_utils", "plgpu", "ref_types"]

# jax 0.12's `plgpu.RefType` says whether inline Mosaic GPU code writes a ref, and a
# `plgpu.kernel` refuses code that may write one of its inputs; jax 0.11's has no such field.
_WRITE_FIELD = "write" in {f.name for f in dataclasses.fields(plgpu.RefType)}


def ref_types(read_only: int, refs: int) -> tuple[Any, ...]:
    """`plgpu.inline_mgpu`'s `arg_types` for `refs` refs of which the first `read_only` (a
    kernel's inputs) the inline code only reads; the others (outputs, scratch) it writes."""
    read = plgpu.RefType(write=False) if _WRITE_FIELD else plgpu.RefType()
    return (read,) * read_only + (plgpu.RefType(),) * (refs - read_only)
