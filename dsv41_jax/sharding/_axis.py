"""The mesh axis a sharded call runs over, with an error that names the call."""

from __future__ import annotations

import jax
from jax import lax


def bound_axis(axis: str, fn: str) -> tuple[int, jax.Array]:
    """(size, this device's index) of mesh axis `axis`, or a ValueError naming `fn` and the
    axis when the call is not inside a `shard_map` over it (JAX's own NameError does not say
    which call needs the axis)."""
    try:
        return lax.axis_size(axis), lax.axis_index(axis)
    except NameError:
        raise ValueError(
            f"{fn} must be called inside jax.shard_map over a mesh with axis {axis!r} (axis "
            f"{axis!r} is not bound here)"
        ) from None
