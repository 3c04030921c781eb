"""What this machine runs: the implementation every op takes for given shapes, and why the
ones before it declined. `python -m dsv41_jax info` prints it for a V4.1 decode step."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _dispatch, _ext, status
from dsv41_jax._ext import H200, DeviceFacts, simulated_device  # tracing as on another device
from dsv41_jax.config import IndexerConfig
from dsv41_jax.logits.api import logits_width
from dsv41_jax.plan import Decision, OpPlan, Plan, StepPlan
from dsv41_jax.step import make_two_level_indexer
from dsv41_jax.types import PagedIndexCache, QueryBundle, row_bytes

__all__ = [
    "H200",
    "Choice",
    "DeviceFacts",
    "decode_step",
    "decode_step_plan",
    "device",
    "explain",
    "simulated_device",
]


@dataclasses.dataclass(frozen=True)
class Choice:
    """One dispatch decision: `op` took `implementation`; `declined` holds (name, reason) of
    the implementations tried before it; `plan`: the call's plan (its decisions and their
    reasons): a `dsv41_jax.Plan` for `topk` and `select_candidate_blocks`, an `OpPlan` for the
    other ops, a `Decision` for a fused layer's select and the sharded entry points' choices;
    None for the other decisions of a composite."""

    op: str
    implementation: str
    declined: tuple[tuple[str, str], ...] = ()
    plan: Plan | OpPlan | Decision | None = None

    def __str__(self) -> str:
        why = "".join(f"\n    {name} declined: {reason}" for name, reason in self.declined)
        planned = ""
        if self.plan is not None:
            planned = "".join(
                f"\n    plan, {what}: {choice} ({reason})"
                for what, choice, reason in self.plan.decisions()
            )
        return f"{self.op}: {self.implementation}{why}{planned}"


def _traced(arg: object) -> bool:
    """An argument `explain` traces: one holding an array or a `jax.ShapeDtypeStruct` anywhere
    in its pytree (a QueryBundle of them, a dict of caches). Everything else (Python and NumPy
    scalars, strings, None, configs, tuples of names) is passed as it is, static."""
    return any(
        isinstance(leaf, (jax.ShapeDtypeStruct, jax.Array, np.ndarray))
        for leaf in jax.tree.leaves(arg)
    )


def _check_traceable(arg: object, name: str) -> None:
    """ValueError naming the argument for a float leaf JAX would trace as another dtype (float64
    with x64 off, which `jax.eval_shape` traces as float32): the call itself refuses float64
    scores, so explaining the float32 call instead would report a choice the call never
    makes."""
    for leaf in jax.tree.leaves(arg):
        dtype = getattr(leaf, "dtype", None)
        if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
            continue
        if jax.dtypes.canonicalize_dtype(dtype) != dtype:
            raise ValueError(
                f"{name} holds {jnp.dtype(dtype).name} values, which the ops refuse (float32, "
                "bfloat16 or float16 scores) and jax.eval_shape would trace as "
                f"{jax.dtypes.canonicalize_dtype(dtype).name}: cast them to the dtype the call "
                "will get"
            )


def explain(fn: Callable[..., object], *args: Any, **kwargs: Any) -> list[Choice]:
    """Trace `fn(*args, **kwargs)` abstractly (`jax.eval_shape`: nothing runs) and return every
    op's choice inside it, in call order.

    Positional and keyword arguments alike: those holding `jax.ShapeDtypeStruct`s or arrays are
    traced; the rest (Python and NumPy numbers, strings, None, configs) stay static, so
    `np.int64(512)` is a static k as `512` is. E.g. `explain(dsv41_jax.topk,
    jax.ShapeDtypeStruct((8, 131072), jnp.float32), jax.ShapeDtypeStruct((8,), jnp.int32),
    k=512)`. Ops inside an inner `jax.jit` the process has already traced with the same shapes
    are cached by JAX and do not show. The choices of `topk` and `select_candidate_blocks`
    carry their plan (`Choice.plan`): each decision with its reason, shown by `str(choice)`.
    A float64 argument (with x64 off) is refused, naming it: traced, it would become float32,
    which the call itself never gets.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    traced_args = {i: a for i, a in enumerate(args) if _traced(a)}
    traced_kwargs = {k: v for k, v in kwargs.items() if _traced(v)}
    for name, arg in (
        *((f"args[{i}]", a) for i, a in traced_args.items()),
        *traced_kwargs.items(),
    ):
        _check_traceable(arg, name)

    def call(targs: dict[int, Any], tkwargs: dict[str, Any]) -> object:
        full = [targs[i] if i in targs else a for i, a in enumerate(args)]
        return fn(*full, **{**kwargs, **tkwargs})

    choices: list[_dispatch.Choice] = []
    token = _dispatch.recording.set(choices)
    try:
        jax.eval_shape(call, traced_args, traced_kwargs)
    finally:
        _dispatch.recording.reset(token)
    return [Choice(*c) for c in choices]


def device() -> dict[str, object]:
    """The facts the dispatch reads: backend, device kind and compute capability, whether the
    CUDA extension is built, each implementation's status (`dsv41_jax.status`), and on a GPU
    the short-row select's cluster occupancy; with them the installed jax and the jax releases
    the GPU test suite has passed on (`status.GPU_VERIFIED_JAX`), which the statuses hold for."""
    verified = ", ".join(status.GPU_VERIFIED_JAX)
    facts: dict[str, object] = {
        "jax": jax.__version__
        + (
            " (GPU-verified)"
            if status.jax_gpu_verified(jax.__version__)
            else f" (not GPU-verified: the GPU tests have run on jax {verified} only)"
        ),
        "backend": _ext.backend(),
        "device": jax.devices()[0].device_kind,
        "compute_capability": _ext.compute_capability() or None,
        "extension": "built" if _ext.available() else "not built",
        "status": {name: str(s) for name, s in status.STATUS.items()},
    }
    if facts["backend"] == "gpu" and _ext.available():
        _ext.register_ffi_targets()
        facts["short_topk_clusters_at_once"] = {
            c: _ext.short_topk_max_clusters(c)
            for c in range(1, _ext.limit("short_topk_max_cluster") + 1)
        }
    return facts


def _abstract(shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """A `jax.ShapeDtypeStruct` where the pytrees hold arrays (traced abstractly)."""
    return cast(jax.Array, jax.ShapeDtypeStruct(shape, dtype))


def _decode_inputs(batch: int, context: int, config: IndexerConfig | None) -> tuple[Any, ...]:
    """A V4.1 decode step's indexer and abstract inputs (queries, caches, lengths, page table)
    at `batch` requests of `context` positions."""
    cfg = config or IndexerConfig()
    batch = _checks.positive_int(batch, "batch")
    context = _checks.positive_int(context, "context")
    pages = -(-context // cfg.page_size)
    if logits_width(pages, cfg.page_size) > _checks.INT32_MAX:
        raise ValueError(f"context must be at most 2**31 - 256 positions, got {context}")
    if batch * pages * cfg.page_size > _checks.INT32_MAX:
        raise ValueError(
            f"batch x context must fit the cache's int32 slots (at most 2**31 - 1): batch {batch}"
            f" x {pages * cfg.page_size} positions is {batch * pages * cfg.page_size}"
        )
    row = row_bytes(cfg.cache_format, cfg.head_dim)
    cache = PagedIndexCache(
        _abstract((batch * pages, cfg.page_size, 1, row), jnp.uint8), cfg.cache_format
    )
    shape = (batch, cfg.next_n, cfg.num_heads)
    if cfg.cache_format == "fp8":
        values, scales = _abstract((*shape, cfg.head_dim), jnp.float8_e4m3fn), None
    else:
        values = _abstract((*shape, cfg.head_dim // 2), jnp.uint8)
        scales = _abstract((*shape, cfg.head_dim // 32), jnp.uint8)
    query = QueryBundle(values, _abstract(shape, jnp.float32), scales, cfg.cache_format)
    layers = (20, 24, 28, 32, 36)
    ix = make_two_level_indexer(cfg, source_layer=20, consumer_layers=layers[1:])
    lens = jax.ShapeDtypeStruct((batch,), jnp.int32)
    table = jax.ShapeDtypeStruct((batch, pages), jnp.int32)
    return ix, dict.fromkeys(layers, query), dict.fromkeys(layers, cache), lens, table


def decode_step(
    batch: int = 8, context: int = 131072, config: IndexerConfig | None = None
) -> list[Choice]:
    """The choices of one V4.1 decode step (publish at layer 20 + four consumers) at
    `batch` requests of `context` positions, traced abstractly."""
    ix, qs, cs, lens, table = _decode_inputs(batch, context, config)
    return explain(lambda q, c, n, b: ix.decode(q, c, n, b), qs, cs, lens, table)


def decode_step_plan(
    batch: int = 8,
    context: int = 131072,
    config: IndexerConfig | None = None,
    device: DeviceFacts | None = None,
) -> StepPlan:
    """The plan of one V4.1 decode step (`TwoLevelIndexer.plan`) at `batch` requests of
    `context` positions, on `device` (e.g. `H200`; None: this machine's)."""
    ix, qs, cs, _, table = _decode_inputs(batch, context, config)
    return ix.plan(qs, cs, table, device=device)


def main(argv: list[str] | None = None) -> None:
    import argparse

    def positive(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an int: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive int, got {value}")
        return value

    ap = argparse.ArgumentParser(prog="python -m dsv41_jax info", description=__doc__)
    ap.add_argument(
        "--batch",
        type=positive,
        default=8,
        help="requests in the decode step whose dispatch is shown (default: %(default)s)",
    )
    ap.add_argument(
        "--context",
        type=positive,
        default=131072,
        help="positions of context per request (default: %(default)s)",
    )
    args = ap.parse_args(argv)
    try:  # the sizes' other limits, before any device fact is printed
        choices = decode_step(args.batch, args.context)
    except ValueError as e:
        ap.error(str(e))
    for key, value in device().items():
        if key == "status":
            print("status:")
            for name, line in cast("dict[str, str]", value).items():
                print(f"  {name}: {line}")
        else:
            print(f"{key}: {value}")
    print(f"\ndecode step, bs {args.batch} x {args.context} positions (V4.1 config):")
    print(decode_step_plan(args.batch, args.context))
    print("\nwhat each op took:")
    seen = set()
    for choice in choices:
        if str(choice) not in seen:  # the four consumers repeat the same choices
            seen.add(str(choice))
            print(f"  {choice}")
