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


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# The placeholders of int32 operands a custom call does not read (a select's starts and members
# where has_starts / has_members is false): literals embedded in the program; zeros of [rows] or
# [rows, 1] made in it would cost a fill kernel a call, and [rows, 0] is no operand (see
# _ext.require_gpu).
UNREAD_ROWS = np.zeros((1,), np.int32)
UNREAD_TABLE = np.zeros((1, 1), np.int32)


def int32(x):
    """An integer index array (lengths, starts, page ids, block ids) as int32, values outside
    the int32 range saturated rather than wrapped: every later clamp to a valid range then gives
    what clamping the original values would (2**32 + 3 clamps to the row length, not to 3)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "dtype"):
        x = np.asarray(x)
        if x.dtype.kind in "iu" and x.dtype.itemsize >= 4 and x.dtype != np.int32:
            x = np.clip(x, INT32_MIN, INT32_MAX)
        return jnp.asarray(x.astype(np.int32))
    dt = jnp.dtype(x.dtype)
    if dt.kind == "u" and dt.itemsize >= 4:
        x = jnp.minimum(x, jnp.asarray(INT32_MAX, dt))
    elif dt.kind == "i" and dt.itemsize > 4:
        x = jnp.clip(x, INT32_MIN, INT32_MAX)
    return x.astype(jnp.int32)


def largest_id(size: int) -> int:
    """The largest block or page id of `size` positions whose every position (`id · size +
    offset`, offset < size) is an int32: a larger id would name positions that wrap."""
    return (INT32_MAX - size + 1) // size


def addressable_pages(block_table, page_size: int):
    """The page table with every page id whose slots (`page · page_size + offset`) would pass
    the int32 range set to -1 (no page): such an id cannot address a real cache, and its slots
    would otherwise wrap to valid-looking ones."""
    return jnp.where(block_table > largest_id(page_size), -1, block_table)


def floating(x, name: str) -> None:
    """Scores: float32, bfloat16 or float16 (each ranked exactly by its float32 value). float64
    is refused, with x64 on or off (a NumPy float64 array would be cast down silently): ranking
    it as float32 would tie values that differ."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")
    if jnp.dtype(x.dtype).itemsize > 4:
        raise ValueError(
            f"{name} must be float32, bfloat16 or float16, got {x.dtype}: the selection ranks "
            "float32 values, so float64 scores that differ could tie; cast them explicitly"
        )


def static_int(v, name: str) -> int:
    """A static integer argument: a Python int, a NumPy integer or a concrete 0-d integer array
    (not bool). A traced value gets a hint to make the argument static."""
    if isinstance(v, jax.core.Tracer):
        raise ValueError(
            f"{name} must be a static int known at trace time, got a traced value; pass a Python "
            "int (mark it static, e.g. jax.jit(..., static_argnames=...))"
        )
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{name} must be an int, got {v!r}")
    if isinstance(v, (int, np.integer)):
        return int(v)
    if (
        isinstance(v, (np.ndarray, jax.Array))
        and v.ndim == 0
        and np.issubdtype(v.dtype, np.integer)
    ):
        return int(v)
    raise ValueError(f"{name} must be an int, got {type(v).__name__} {v!r}")


def _int_at_least(v, name: str, least: int, what: str) -> int:
    """A static int >= `least`; ValueError saying it must be `what` otherwise."""
    try:
        n = static_int(v, name)
    except ValueError as e:
        if "traced" in str(e):
            raise
        raise ValueError(f"{name} must be {what}, got {v!r}") from None
    if n < least:
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return n


def positive_int(v, name: str) -> int:
    """A static positive int, at most 2**31 - 1 (every size and count the kernels take is
    int32)."""
    n = _int_at_least(v, name, 1, "a positive int")
    if n > INT32_MAX:
        raise ValueError(f"{name} must be at most 2**31 - 1, got {n}")
    return n


def nonnegative_int(v, name: str) -> int:
    """A static int >= 0 (a count or a capacity that may be zero)."""
    return _int_at_least(v, name, 0, "a non-negative int")


def device_fields(owner: str, record) -> tuple[tuple[int, ...], int]:
    """The fields a device record (`_ext.DeviceFacts`, `plan.Device`) shares, checked:
    `backend` a non-empty string, `compute_capability` a string, `sm_count` and every count of
    `short_topk_clusters` non-negative ints. Returns (the cluster counts as a tuple, sm_count);
    ValueError naming `owner.field` otherwise."""
    for name in ("backend", "compute_capability"):
        value = getattr(record, name)
        if not isinstance(value, str) or (name == "backend" and not value):
            raise ValueError(f"{owner}.{name} must be a string, got {value!r}")
    clusters = record.short_topk_clusters
    if isinstance(clusters, (str, bytes)) or not isinstance(clusters, Sequence):
        raise ValueError(
            f"{owner}.short_topk_clusters must be a sequence of ints (clusters of 1, 2, ... CTAs "
            f"that run at once), got {clusters!r}"
        )
    counts = tuple(nonnegative_int(c, f"{owner}.short_topk_clusters") for c in clusters)
    return counts, nonnegative_int(record.sm_count, f"{owner}.sm_count")


def layer_ids(
    source_layer, consumer_layers, plain_layers
) -> tuple[int | None, tuple[int, ...], tuple[int, ...]]:
    """The indexer layers of a step as Python ints: `source_layer` None or an int, the others
    sequences of ints (a tuple, list, range or 1-d integer array). ValueError naming the
    argument for anything else, a layer listed twice, or consumers without a source."""

    def ids(v, name: str) -> tuple[int, ...]:
        if isinstance(v, np.ndarray) and v.ndim == 1:
            v = v.tolist()
        if not isinstance(v, (tuple, list, range)):
            raise ValueError(
                f"{name} must be a sequence of layer ids, e.g. (24, 28), got {type(v).__name__} "
                f"{v!r}"
            )
        return tuple(static_int(x, name) for x in v)

    source = None if source_layer is None else static_int(source_layer, "source_layer")
    consumers = ids(consumer_layers, "consumer_layers")
    plain = ids(plain_layers, "plain_layers")
    if source is None and consumers:
        raise ValueError("consumer_layers need a source_layer to publish their candidates")
    every = ([] if source is None else [source]) + [*consumers, *plain]
    if len(set(every)) != len(every):
        raise ValueError(f"a layer appears twice among source, consumer and plain layers: {every}")
    return source, consumers, plain


def boolean(v, name: str) -> bool:
    """A static flag: a Python or NumPy bool only (a string such as "no" is an error, not True)."""
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {type(v).__name__} {v!r}")
    return bool(v)


def array(x, name: str, *, ranked: bool = False):
    """An array argument: JAX and NumPy arrays pass; other array-likes (lists, scalars) are
    converted when they hold numbers, else a ValueError names the argument.

    `ranked`: scores the selection ranks. A list of Python floats is float64, and stays a NumPy
    float64 array so `floating` refuses it as it refuses a float64 array (converted to a JAX
    array with x64 off it would silently become float32, tying values that differ)."""
    if isinstance(x, (jax.Array, np.ndarray)) or hasattr(x, "__jax_array__"):
        return x
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        out = np.asarray(x)
    except Exception:  # noqa: BLE001 - ragged lists and other non-arrays
        out = None
    if (
        out is None
        or out.dtype == object
        or not (np.issubdtype(out.dtype, np.number) or out.dtype == np.bool_)
    ):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}")
    if ranked and out.dtype == np.float64:
        return out
    return jnp.asarray(out)


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


def score_rows(scores, lengths, starts) -> int:
    """Shared checks of a `[rows, N]` score matrix with its per-row lengths (and starts)."""
    rank(scores, 2, "scores")
    floating(scores, "scores")
    rows, n = scores.shape
    shape(lengths, (rows,), "lengths")
    integer(lengths, "lengths")
    if starts is None:
        lengths_within(lengths, n, "lengths", f"scores has {n} columns")
    else:
        shape(starts, (rows,), "starts")
        integer(starts, "starts")
        lengths_within(starts, n, "starts", f"scores has {n} columns")
        s, ln = concrete(starts), concrete(lengths)
        if s is not None and ln is not None and s.size and ((s + ln) > n).any():
            raise ValueError(f"starts + lengths must be at most the {n} columns of scores")
    return rows
