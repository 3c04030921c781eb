"""One registry helper for every op's `implementation=` argument.

Each op owns an ordered table {name: function}, fastest first; "reference" is always last and
always works. `implementation=None` tries them in order: an implementation that cannot handle
the inputs (no GPU, no extension, unsupported shape) raises NotImplementedError and the next one
is tried, with one log line per (op, implementation, reason) so a slow path is never silent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax

logger = logging.getLogger("dsv41_jax")

Implementation = str | Sequence[str] | None
_logged: set[tuple[str, str, str]] = set()


class Op:
    """An op name and its implementations, fastest first."""

    def __init__(self, name: str, **impls: Callable[..., Any]) -> None:
        self.name = name
        self.impls: dict[str, Callable[..., Any]] = dict(impls)

    def register(self, impl_name: str, fn: Callable[..., Any], *, first: bool = True) -> None:
        """Add an implementation (kernels register themselves ahead of the reference)."""
        items = [(k, v) for k, v in self.impls.items() if k != impl_name]
        items = [(impl_name, fn), *items] if first else [*items, (impl_name, fn)]
        self.impls = dict(items)

    def __call__(self, implementation: Implementation, *args: Any, **kwargs: Any) -> Any:
        if implementation is None:
            names: tuple[str, ...] = tuple(self.impls)
        elif isinstance(implementation, str):
            names = (implementation,)
        else:
            names = tuple(implementation)
        for n in names:
            if n not in self.impls:
                raise ValueError(
                    f"{self.name}: unknown implementation {n!r}; known: {', '.join(self.impls)}"
                )
        reasons = []
        for n in names:
            try:
                return self.impls[n](*args, **kwargs)
            except NotImplementedError as e:
                reasons.append(f"{n}: {e}")
                if len(names) > 1:
                    _log_fallback(self.name, n, str(e))
        raise NotImplementedError(
            f"{self.name}: no implementation accepted the inputs ({'; '.join(reasons)})"
        )


def _log_fallback(op: str, impl: str, reason: str) -> None:
    key = (op, impl, reason)
    if key in _logged:
        return
    _logged.add(key)
    # On a GPU a skipped kernel means a slow path: say so loudly. On CPU it is the expected path.
    level = logging.WARNING if jax.default_backend() == "gpu" else logging.INFO
    logger.log(level, "%s: skipping implementation %r (%s)", op, impl, reason)
