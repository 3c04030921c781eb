"""The device record every plan reads: what JAX runs on and what the CUDA extension can run
there, read once per device. It sits below the plan and the implementations, which both read
it (`dsv41_jax.plan` re-exports its names)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from dsv41_jax import _checks, _ext
from dsv41_jax._ext import PORTABLE, DeviceFacts

__all__ = ["Device", "device_record", "ffi_declines", "no_cuda_select"]


@dataclasses.dataclass(frozen=True)
class Device:
    """What the plan reads of a device, read once: JAX's backend, the compute capability, the
    streaming multiprocessors, how many clusters of 1, 2, ... CTAs of the short-row select run
    at once, and the CUDA extension's limits (`_ext.limit`; empty where there is no CUDA select
    to run: a CPU, or no extension). Build it with `device_record()`."""

    backend: str
    compute_capability: str = ""
    sm_count: int = 0
    short_topk_clusters: tuple[int, ...] = ()
    limits: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        # A record built by hand is checked as `device_record` builds one (frozen and hashable:
        # sequences are stored as tuples).
        counts, _ = _checks.device_fields("Device", self)
        limits = self.limits
        if isinstance(limits, (str, bytes)) or not isinstance(limits, Sequence):
            raise ValueError(f"Device.limits must be a sequence of (name, int), got {limits!r}")
        pairs = []
        for pair in limits:
            if (
                not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or not isinstance(pair[0], str)
            ):
                raise ValueError(f"Device.limits must be a sequence of (name, int), got {pair!r}")
            pairs.append((pair[0], _checks.static_int(pair[1], f"Device.limits[{pair[0]!r}]")))
        object.__setattr__(self, "short_topk_clusters", counts)
        object.__setattr__(self, "limits", tuple(pairs))

    def limit(self, name: str) -> int:
        """One of the extension's limits (KeyError when the record has none by that name)."""
        return dict(self.limits)[name]

    def clusters_at_once(self, cluster: int) -> int:
        """Clusters of `cluster` CTAs of the short-row select that run at once (0: unknown)."""
        clusters = self.short_topk_clusters
        return clusters[cluster - 1] if 1 <= cluster <= len(clusters) else 0

    def __str__(self) -> str:
        if self.backend != "gpu":
            return self.backend
        return f"gpu {self.compute_capability or '?'}, {self.sm_count} SMs"


def device_record(facts: DeviceFacts | None = None) -> Device:
    """The device record of `facts` (a `dsv41_jax.info.DeviceFacts`, e.g. `info.H200`), or of
    the device the ops trace for when None (the simulated one inside
    `dsv41_jax.info.simulated_device`). A GPU record holds the installed extension's limits;
    a CPU record, or one without the extension, holds none."""
    if facts is None:
        facts = _ext.facts()
    if not isinstance(facts, DeviceFacts):
        raise ValueError(f"device must be a DeviceFacts or None, got {type(facts).__name__}")
    return _record(facts)


@functools.cache
def _record(facts: DeviceFacts) -> Device:
    limits: tuple[tuple[str, int], ...] = ()
    if facts.backend == "gpu" and _ext.available():
        limits = tuple(sorted((k, int(v)) for k, v in _ext.extension().LIMITS.items()))
    return Device(
        facts.backend,
        facts.compute_capability,
        facts.sm_count,
        tuple(facts.short_topk_clusters),
        limits,
    )


def ffi_declines(device: Device, op: str, archs: tuple[str, ...] = PORTABLE) -> str | None:
    """Why `op`'s FFI kernels, built for the compute capabilities `archs`, cannot run on
    `device` (what `_ext.require_gpu` raises there), or None."""
    why = _ext.gpu_declines(op, archs, device.backend, device.compute_capability)
    if why is None and not device.limits:
        why = f"{op}: the CUDA extension is not built (the device record holds none of its limits)"
    return why


def no_cuda_select(device: Device) -> str | None:
    """Why `device` runs no CUDA select (None: it does)."""
    if device.backend != "gpu":
        return f"no CUDA select on a {device.backend} backend"
    if not device.limits:
        return "no CUDA select: the CUDA extension is not built"
    return None
