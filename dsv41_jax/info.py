"""What this machine runs: the implementation every op takes for given shapes, and why the
ones before it declined. `python -m dsv41_jax info` prints it for a V4.1 decode step."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp

from dsv41_jax import _dispatch, _ext
from dsv41_jax.config import IndexerConfig
from dsv41_jax.types import _row_bytes

__all__ = ["Choice", "decode_step", "device", "explain"]


@dataclasses.dataclass(frozen=True)
class Choice:
    """One dispatch decision: `op` took `implementation`; `declined` holds (name, reason) of
    the implementations tried before it."""

    op: str
    implementation: str
    declined: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        why = "".join(f"\n    {name} declined: {reason}" for name, reason in self.declined)
        return f"{self.op}: {self.implementation}{why}"


def explain(fn: Callable[..., object], *args: Any, **kwargs: Any) -> list[Choice]:
    """Trace `fn(*args, **kwargs)` abstractly (`jax.eval_shape`: nothing runs, arguments may
    be `jax.ShapeDtypeStruct`s; Python numbers, strings and None stay static) and return every
    op's choice inside it, in call order.

    E.g. `explain(dsv41_jax.topk, jax.ShapeDtypeStruct((8, 131072), jnp.float32),
    jax.ShapeDtypeStruct((8,), jnp.int32), 512)`. Ops inside an inner `jax.jit` the process has
    already traced with the same shapes are cached by JAX and do not show.
    """
    static = {i: a for i, a in enumerate(args) if isinstance(a, (int, float, str, type(None)))}

    def call(*traced: Any) -> object:
        it = iter(traced)
        return fn(*(static[i] if i in static else next(it) for i in range(len(args))), **kwargs)

    choices: list[_dispatch.Choice] = []
    token = _dispatch.recording.set(choices)
    try:
        jax.eval_shape(call, *(a for i, a in enumerate(args) if i not in static))
    finally:
        _dispatch.recording.reset(token)
    return [Choice(*c) for c in choices]


def device() -> dict[str, object]:
    """The facts the dispatch reads: backend, device kind and compute capability, whether the
    CUDA extension is built, and on a GPU the short-row select's cluster occupancy."""
    facts: dict[str, object] = {
        "backend": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
        "compute_capability": _ext.compute_capability() or None,
        "extension": "built" if _ext.available() else "not built",
    }
    if facts["backend"] == "gpu" and _ext.available():
        _ext.register_ffi_targets()
        facts["short_topk_clusters_at_once"] = {
            c: _ext.short_topk_max_clusters(c) for c in range(1, 9)
        }
    return facts


def _abstract(shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """A `jax.ShapeDtypeStruct` where the pytrees hold arrays (traced abstractly)."""
    return cast(jax.Array, jax.ShapeDtypeStruct(shape, dtype))


def decode_step(
    batch: int = 8, context: int = 131072, config: IndexerConfig | None = None
) -> list[Choice]:
    """The choices of one V4.1 decode step (publish at layer 20 + four consumers) at
    `batch` requests of `context` positions, traced abstractly."""
    import dsv41_jax as dj

    cfg = config or IndexerConfig()
    pages = -(-context // cfg.page_size)
    row = _row_bytes(cfg.cache_format, cfg.head_dim)
    cache = dj.PagedIndexCache(
        _abstract((batch * pages, cfg.page_size, 1, row), jnp.uint8), cfg.cache_format
    )
    shape = (batch, cfg.next_n, cfg.num_heads)
    if cfg.cache_format == "fp8":
        values, scales = _abstract((*shape, cfg.head_dim), jnp.float8_e4m3fn), None
    else:
        values = _abstract((*shape, cfg.head_dim // 2), jnp.uint8)
        scales = _abstract((*shape, cfg.head_dim // 32), jnp.uint8)
    query = dj.QueryBundle(values, _abstract(shape, jnp.float32), scales, cfg.cache_format)
    layers = (20, 24, 28, 32, 36)
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=layers[1:])
    lens = jax.ShapeDtypeStruct((batch,), jnp.int32)
    table = jax.ShapeDtypeStruct((batch, pages), jnp.int32)
    qs, cs = dict.fromkeys(layers, query), dict.fromkeys(layers, cache)
    return explain(lambda q, c, n, b: ix.decode(q, c, n, b), qs, cs, lens, table)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dsv41_jax info", description=__doc__)
    ap.add_argument(
        "--batch",
        type=int,
        default=8,
        help="requests in the decode step whose dispatch is shown (default: %(default)s)",
    )
    ap.add_argument(
        "--context",
        type=int,
        default=131072,
        help="positions of context per request (default: %(default)s)",
    )
    args = ap.parse_args(argv)
    for key, value in device().items():
        print(f"{key}: {value}")
    print(f"\ndecode step, bs {args.batch} x {args.context} positions (V4.1 config):")
    seen = set()
    for choice in decode_step(args.batch, args.context):
        if str(choice) not in seen:  # the four consumers repeat the same choices
            seen.add(str(choice))
            print(f"  {choice}")
