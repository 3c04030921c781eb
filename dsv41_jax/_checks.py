"""Trace-time argument checks: every failure is a ValueError that names the argument."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def rank(x, n: int, name: str) -> None:
    if np.ndim(x) != n:
        raise ValueError(f"{name} must have rank {n}, got shape {tuple(np.shape(x))}")


def shape(x, expected: Sequence[int | None], name: str) -> None:
    """`expected` may hold None for a free dimension."""
    got = tuple(np.shape(x))
    if len(got) != len(expected) or any(e is not None and g != e for g, e in zip(got, expected)):
        want = tuple("?" if e is None else e for e in expected)
        raise ValueError(f"{name} must have shape {want}, got {got}")


def dtype(x, allowed, name: str) -> None:
    allowed = tuple(jnp.dtype(a) for a in (allowed if isinstance(allowed, tuple) else (allowed,)))
    if jnp.dtype(x.dtype) not in allowed:
        names = " or ".join(str(a) for a in allowed)
        raise ValueError(f"{name} must have dtype {names}, got {x.dtype}")


def integer(x, name: str) -> None:
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise ValueError(f"{name} must have an integer dtype, got {x.dtype}")


def floating(x, name: str) -> None:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")


def positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return int(v)


def concrete(x) -> np.ndarray | None:
    """The value of `x` when it is known at trace time, else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001 - abstract values of any kind
        return None


def lengths_within(x, capacity: int, name: str, what: str) -> None:
    """Lengths known at trace time must lie in [0, capacity]. Under jit they cannot be seen, and
    every implementation clamps them to the same range instead (documented on each op)."""
    v = concrete(x)
    if v is None or v.size == 0:
        return
    lo, hi = int(v.min()), int(v.max())
    if lo < 0 or hi > capacity:
        raise ValueError(f"{name} must lie in [0, {capacity}] ({what}); got values in [{lo}, {hi}]")
