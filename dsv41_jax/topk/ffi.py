"""`implementation="ffi"` of logical_to_physical: an elementwise CUDA kernel (cuda/)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _ext

TARGET = "dsv41_logical_to_physical"


def logical_to_physical(indices: jax.Array, block_table: jax.Array, page_size: int) -> jax.Array:
    _ext.require_gpu(TARGET)
    out = jax.ShapeDtypeStruct(indices.shape, jnp.int32)
    return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        indices.astype(jnp.int32), block_table.astype(jnp.int32), page_size=np.int32(page_size)
    )
