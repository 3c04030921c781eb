"""One registry helper for every op's `implementation=` argument, and the plan of the ops
whose only decisions are which implementation runs and which kernel family it takes.

Each op owns an ordered table {name: implementation}, fastest first by the latest device
numbers (stated beside each table); "reference" always works, so an implementation measured
slower than it is ordered after it and runs only when named. Every call is planned before
anything is traced: each implementation's `supports(device, *args)` says from shapes, dtypes,
static arguments and the device record (`dsv41_jax.plan.device_record`) why it cannot take the
call, the plan (`OpPlan`) runs the first of the order that can, and the ones passed over are
logged once per (op, implementation, reason), so a slow path is never silent. The selection
ops plan more (`dsv41_jax.plan.Plan`: the CUDA select too) and run it through `run_planned`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from dsv41_jax import _ext, status
from dsv41_jax._device import Device, device_record
from dsv41_jax._ext import ExtensionUnavailable

logger = logging.getLogger("dsv41_jax")

Implementation = str | Sequence[str] | None
KNOWN = frozenset({"ffi", "pallas", "reference"})  # every implementation name of every op
_logged: set[tuple[str, str, str]] = set()
# While `dsv41_jax.info.explain` traces a function: every op's choice, in call order.
# (op, implementation, declined, plan): the call's plan (an `OpPlan` or a `dsv41_jax.plan.Plan`).
Choice = tuple[str, str, tuple[tuple[str, str], ...], Any]
recording: contextvars.ContextVar[list[Choice] | None] = contextvars.ContextVar(
    "recording", default=None
)


def record(
    op: str, implementation: str, declined: Sequence[tuple[str, str]] = (), plan: Any = None
) -> None:
    """Note a dispatch decision for `dsv41_jax.info.explain` (nothing when it is not tracing);
    `plan`: the call's plan, where it has one."""
    choices = recording.get()
    if choices is not None:
        choices.append((op, implementation, tuple(declined), plan))


@dataclasses.dataclass(frozen=True)
class Impl:
    """One implementation of an op.

    Attributes:
      run: the function, called with the op's arguments (and `kernel=` where `kernel` is set).
      supports: `supports(device, *args) -> str | None`, why it cannot take a call of these
        arguments on `device` (a `dsv41_jax.plan.Device`), or None. It reads only shapes,
        dtypes, static arguments and the record, so a call is planned before anything is
        traced. None: it takes every call the op's checks let through (the references).
      kernel: `kernel(device) -> str`, the kernel family it runs on `device` (e.g. "sm90" or
        "sm100"): a plan decision, passed to `run` as `kernel=`.
      status: (kernel family, `dsv41_jax.status` record name) of each family.
    """

    run: Callable[..., Any]
    supports: Callable[..., str | None] | None = None
    kernel: Callable[[Any], str] | None = None
    status: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class OpPlan:
    """The decisions of one call of an op without a plan of its own (the logits ops, block
    scores, the candidate table, the page transform), each with its reason: a frozen, hashable
    value made before anything is traced.

    Attributes:
      op: the op; device: the device record it read; implementation: the `implementation=`
        asked for (None or a tuple of names).
      order: the implementations to try, in order; runs: the first that supports the call
        (None: none does); declined: (name, why) of those before it.
      kernel: the kernel family `runs` takes on the device (None where it has one only);
        kernel_status: where that family has been verified (`dsv41_jax.status`).
    """

    op: str
    device: Device
    implementation: tuple[str, ...] | None
    order: tuple[str, ...]
    runs: str | None
    declined: tuple[tuple[str, str], ...]
    kernel: str | None = None
    kernel_status: str | None = None

    def decisions(self) -> tuple[tuple[str, str, str], ...]:
        """(decision, choice, reason) of each decision, for printing."""
        asked = self.implementation
        order_reason = (
            "fastest first (the op's table)"
            if asked is None
            else f"implementation={asked!r}, as asked"
        )
        why_runs = "; ".join(f"{n} declines: {why}" for n, why in self.declined)
        out = [
            ("implementations", ", ".join(self.order), order_reason),
            ("runs", self.runs or "none", why_runs or f"the first of {', '.join(self.order)}"),
        ]
        if self.kernel is not None:
            cc = self.device.compute_capability or "unknown"
            why = f"compute capability {cc}"
            if self.kernel_status is not None:
                why += f"; {self.kernel_status}"
            out.append(("kernel", self.kernel, why))
        return tuple(out)

    def __str__(self) -> str:
        lines = [f"plan: {self.op} on {self.device}"]
        lines += [f"  {what}: {choice} ({why})" for what, choice, why in self.decisions()]
        return "\n".join(lines)


class Op:
    """An op name and its implementations, fastest first (each an `Impl`, or a function that
    takes every call). Calling it plans the call (`plan`) and runs what the plan names; an op
    whose fastest implementation depends on more than that runs the one its own plan names
    (`run_planned`, `dsv41_jax.plan`)."""

    def __init__(self, name: str, **impls: Impl | Callable[..., Any]) -> None:
        assert set(impls) <= KNOWN, impls
        self.name = name
        self.impls: dict[str, Impl] = {
            n: i if isinstance(i, Impl) else Impl(i) for n, i in impls.items()
        }

    def resolve(self, implementation: Implementation) -> tuple[str, ...]:
        """The implementation names to try, in order (`resolve_names`)."""
        return resolve_names(self.name, tuple(self.impls), implementation)

    def plan(
        self, implementation: Implementation, *args: Any, device: Device | None = None
    ) -> OpPlan:
        """The plan of a call with these arguments on `device` (None: the device the ops trace
        for): the first implementation of the order whose `supports` takes it."""
        record = device_record() if device is None else device
        order = self.resolve(implementation)
        declined: list[tuple[str, str]] = []
        runs = None
        for name in order:
            impl = self.impls[name]
            why = None if impl.supports is None else impl.supports(record, *args)
            if why is None:
                runs = name
                break
            declined.append((name, why))
        family = None if runs is None else self.impls[runs].kernel
        kernel = None if family is None else family(record)
        verified = None
        if runs is not None and kernel is not None:
            key = dict(self.impls[runs].status).get(kernel)
            verified = None if key is None else str(status.of(key))
        return OpPlan(
            self.name,
            record,
            shared(implementation),
            order,
            runs,
            tuple(declined),
            kernel,
            verified,
        )

    def __call__(self, implementation: Implementation, *args: Any) -> Any:
        p = self.plan(implementation, *args)
        if p.kernel_status is not None and not p.kernel_status.startswith("verified"):
            _log_once(
                logging.WARNING,
                (self.name, p.kernel or "", p.kernel_status),
                "%s: running the %s kernel, %s in this project",
            )
        return self.run_planned(p, *args, **({} if p.kernel is None else {"kernel": p.kernel}))

    def run_planned(self, plan: Any, *args: Any, **options: Any) -> Any:
        """Run the implementation `plan.runs` (an `OpPlan` or a `dsv41_jax.plan.Plan`: the
        first of its order that supports the call) with `options`, recording the plan and the
        implementations it passed over; an ExtensionUnavailable naming each one's reason where
        none supports the call (or the one planned declines: a plan made for another device
        than the one tracing)."""
        declined = list(plan.declined)
        if plan.runs is not None and plan.runs != "reference":  # the reference runs anywhere
            _ext.check_runs_here(f"{self.name} (implementation {plan.runs!r})")
        if plan.runs is not None:
            try:
                out = self.impls[plan.runs].run(*args, **options)
            except NotImplementedError as e:
                declined.append((plan.runs, f"{e} (the plan was made for {plan.device})"))
            else:
                if len(plan.order) > 1:  # a fallback past a faster one: logged
                    for name, why in declined:
                        _log_fallback(self.name, name, why)
                record(self.name, plan.runs, declined, plan)
                return out
        # ExtensionUnavailable (a NotImplementedError): "this path is not available here".
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
    # On a GPU a skipped kernel means a slow path: say so loudly. On CPU it is the expected path.
    level = logging.WARNING if _ext.backend() == "gpu" else logging.INFO
    _log_once(level, (op, repr(impl), reason), "%s: skipping implementation %s (%s)")


def _log_once(level: int, args: tuple[str, str, str], message: str) -> None:
    """Log `message % args` once per `args` in the process."""
    if args in _logged:
        return
    _logged.add(args)
    logger.log(level, message, *args)


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
