"""One registry helper for every op's `implementation=` argument.

Each op owns an ordered table {name: function}, fastest first by the latest device numbers
(stated beside each table); "reference" always works, so an implementation measured slower than
it is ordered after it and runs only when named. `implementation=None` tries them in order: an
implementation that cannot handle the inputs (no GPU, no extension, unsupported shape) raises
NotImplementedError and the next one is tried, with one log line per (op, implementation,
reason) so a slow path is never silent. The selection ops decide ahead instead: their plan
(`dsv41_jax.plan`) names the implementation that runs from each one's `supports`
(`Op.run_planned`).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence
from typing import Any

from dsv41_jax import _ext
from dsv41_jax._ext import ExtensionUnavailable

logger = logging.getLogger("dsv41_jax")

Implementation = str | Sequence[str] | None
KNOWN = frozenset({"ffi", "pallas", "reference"})  # every implementation name of every op
_logged: set[tuple[str, str, str]] = set()
# While `dsv41_jax.info.explain` traces a function: every op's choice, in call order.
# (op, implementation, declined, plan): the plan (a `dsv41_jax.plan.Plan`) of ops that have one.
Choice = tuple[str, str, tuple[tuple[str, str], ...], Any]
recording: contextvars.ContextVar[list[Choice] | None] = contextvars.ContextVar(
    "recording", default=None
)


def record(
    op: str, implementation: str, declined: Sequence[tuple[str, str]] = (), plan: Any = None
) -> None:
    """Note a dispatch decision for `dsv41_jax.info.explain` (nothing when it is not tracing);
    `plan`: the call's `dsv41_jax.plan.Plan`, for ops that have one."""
    choices = recording.get()
    if choices is not None:
        choices.append((op, implementation, tuple(declined), plan))


class Op:
    """An op name and its implementations, fastest first (an op whose fastest implementation
    depends on the shapes runs the one its plan names: `run_planned`, `dsv41_jax.plan`)."""

    def __init__(self, name: str, **impls: Callable[..., Any]) -> None:
        assert set(impls) <= KNOWN, impls
        self.name = name
        self.impls: dict[str, Callable[..., Any]] = dict(impls)

    def resolve(self, implementation: Implementation) -> tuple[str, ...]:
        """The implementation names to try, in order (`resolve_names`)."""
        return resolve_names(self.name, tuple(self.impls), implementation)

    def __call__(self, implementation: Implementation, *args: Any, **kwargs: Any) -> Any:
        return self.run(self.resolve(implementation), *args, **kwargs)

    def run(self, names: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        """Try the implementations `names` in order on the arguments; the first that does not
        decline (NotImplementedError) returns."""
        reasons = []
        for n in names:
            try:
                out = self.impls[n](*args, **kwargs)
            except NotImplementedError as e:
                reasons.append((n, str(e)))
                if len(names) > 1:
                    _log_fallback(self.name, n, str(e))
                continue
            record(self.name, n, reasons)
            return out
        # ExtensionUnavailable (a NotImplementedError): "this path is not available here".
        raise ExtensionUnavailable(
            f"{self.name}: no implementation accepted the inputs "
            f"({'; '.join(f'{n}: {why}' for n, why in reasons)})"
        )

    def run_planned(self, plan: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the implementation `plan.runs` (a `dsv41_jax.plan.Plan`: the first of its order
        that supports the call), recording the plan and the implementations it passed over; an
        ExtensionUnavailable naming each one's reason where none supports the call (or the one
        planned declines: a plan made for another device than the one tracing)."""
        declined = list(plan.declined)
        if plan.runs is not None:
            try:
                out = self.impls[plan.runs](*args, **kwargs)
            except NotImplementedError as e:
                declined.append((plan.runs, f"{e} (the plan was made for {plan.device})"))
            else:
                if len(plan.order) > 1:  # a fallback past a faster one: logged
                    for name, why in declined:
                        _log_fallback(self.name, name, why)
                record(self.name, plan.runs, declined, plan)
                return out
        raise ExtensionUnavailable(
            f"{self.name}: no implementation accepted the inputs "
            f"({'; '.join(f'{n}: {why}' for n, why in declined)})"
        )


def resolve_names(op: str, names: Sequence[str], implementation: Implementation) -> tuple[str, ...]:
    """The implementation names op `op` (whose implementations are `names`, fastest first)
    tries, in order.

    None: all of them. A string: exactly that one (ValueError if the op has no such
    implementation). A non-empty sequence: a preference order shared by several ops, so names
    this op lacks are skipped (e.g. `("pallas", "ffi", "reference")` runs the Pallas top-k and
    the FFI logits); when it names none of this op's, the op uses its own order (composites
    such as `publish` pass a single name this way, see `shared`).
    """
    if implementation is None:
        return tuple(names)
    if isinstance(implementation, str):
        if implementation not in names:
            raise ValueError(
                f"{op}: unknown implementation {implementation!r}; known: {', '.join(names)}"
            )
        return (implementation,)
    preference = shared(implementation)
    assert preference  # shared refuses None here and an empty sequence
    return tuple(n for n in preference if n in names) or tuple(names)


def _log_fallback(op: str, impl: str, reason: str) -> None:
    key = (op, impl, reason)
    if key in _logged:
        return
    _logged.add(key)
    # On a GPU a skipped kernel means a slow path: say so loudly. On CPU it is the expected path.
    level = logging.WARNING if _ext.backend() == "gpu" else logging.INFO
    logger.log(level, "%s: skipping implementation %r (%s)", op, impl, reason)


def shared(implementation: Implementation) -> tuple[str, ...] | None:
    """`implementation` as composites (publish, select, the step, the sharded entry points)
    forward it to their ops: None, or a tuple of known names (hashable, so it can be a jit static
    argument). A single name becomes a one-name preference, so an op without it (e.g.
    `block_amax` for "ffi") runs its own order instead of raising."""
    if implementation is None:
        return None
    names = (implementation,) if isinstance(implementation, str) else implementation
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"implementation must be None, a name or a sequence of names, got {implementation!r}"
        )
    if not names:
        raise ValueError("implementation must not be an empty sequence")
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"unknown implementation names {unknown}; known: {sorted(KNOWN)}")
    return tuple(names)
