"""The optional CUDA extension: loading, FFI target registration, and one clear error without it."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import logging
from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from dsv41_jax import _checks, status

EXTENSION = "_dsv41_jax_ext"


class ExtensionUnavailable(NotImplementedError):
    """The CUDA extension (or a GPU to run it on) is missing; the reference path still works."""


# How to build the extension into an existing environment (what `make install` does): the build
# reads jaxlib's and DeepGEMM's headers from that environment, hence no build isolation.
BUILD_COMMAND = (
    "pip install 'scikit-build-core>=1.1' 'pybind11>=2.12' && "
    "pip install --no-deps sgl-deep-gemm==0.2.5 && "
    "pip install --no-build-isolation --no-deps ."
)


def _missing_message(error: ImportError) -> str:
    if isinstance(error, ModuleNotFoundError) and error.name == EXTENSION:
        return (
            f"the dsv41_jax CUDA extension ({EXTENSION}) is not installed: it is built only when "
            "nvcc (CUDA >= 12.9) is on PATH at install time and DSV41_BUILD_CUDA is not OFF "
            "(`make CUDA=0` and `-C dsv41.cuda=false` turn it off). To build it, on a machine "
            "with nvcc >= 12.9, from a checkout of dsv41_jax: `make install` (its own .venv), "
            f"or into the current environment: `{BUILD_COMMAND}`."
        )
    return f"the dsv41_jax CUDA extension ({EXTENSION}) is installed but failed to load: {error}"


@functools.cache
def _load() -> ModuleType | str:
    try:
        return importlib.import_module(EXTENSION)
    except ImportError as e:
        return _missing_message(e)


def limit(name: str) -> int:
    """A limit the C++ side defines (buffer sizes, maximum shapes, mode values), read from the
    extension so that Python never mirrors it by hand."""
    return int(extension().LIMITS[name])


def available() -> bool:
    return not isinstance(_load(), str)


def extension() -> ModuleType:
    """The extension module, or ExtensionUnavailable naming what is missing."""
    ext = _load()
    if isinstance(ext, str):
        raise ExtensionUnavailable(ext)
    return ext


@functools.cache
def register_targets() -> tuple[str, ...]:
    """Register every FFI handler of the extension with XLA for the CUDA platform (once)."""
    names = []
    for name, capsule in extension().registrations().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
        names.append(name)
    return tuple(names)


@functools.cache
def _prepare_devices() -> None:
    # Kernel attributes are set here, once, outside any CUDA-graph capture.
    jax.devices("gpu")  # JAX's CUDA context exists before the extension touches the devices
    error = extension().prepare()
    if error:
        raise RuntimeError(f"dsv41_jax CUDA extension: preparing the devices failed: {error}")


def register_ffi_targets() -> tuple[str, ...]:
    """Register the extension's XLA FFI targets (`docs/ffi_targets.md`) for direct custom calls.

    The ops of `dsv41_jax` do this themselves; call it only to use the targets from your own
    `jax.ffi.ffi_call`. On a CUDA backend it also sets the kernels' one-time attributes, which must
    happen before (not during) a CUDA-graph capture. Returns the target names.

    Raises:
      ExtensionUnavailable: the CUDA extension is not installed (or does not load).
    """
    names = register_targets()
    if _simulated.get() is None and jax.default_backend() == "gpu":
        _prepare_devices()
    return names


def short_topk_max_clusters(cluster: int) -> int:
    """How many clusters of `cluster` CTAs of the short-row select the current GPU runs at once
    (read once per size from the CUDA occupancy calculator; 0 when it cannot tell)."""
    facts = _simulated.get()
    if facts is not None:
        clusters = facts.short_topk_clusters
        return clusters[cluster - 1] if 1 <= cluster <= len(clusters) else 0
    return _occupancy(cluster)


@functools.cache
def _occupancy(cluster: int) -> int:
    return int(extension().short_topk_max_clusters(cluster))


# Compute capabilities with machine code in the extension (CMakeLists.txt): the project's own
# kernels are built for sm_90a and sm_100a, DeepGEMM's for the one architecture they exist for.
# An 'a' target runs on exactly that compute capability.
PORTABLE = ("9.0", "10.0")
SM90 = ("9.0",)
SM100 = ("10.0",)


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What the dispatch reads of the device it traces for: JAX's backend ("gpu", "cpu", ...),
    the first GPU's compute capability ("major.minor", "" when none), how many clusters of
    1, 2, ... 8 CTAs of the short-row select run at once (its occupancy calculator's answer),
    and the GPU's streaming multiprocessors (0 when unknown)."""

    backend: str
    compute_capability: str
    short_topk_clusters: tuple[int, ...] = ()
    sm_count: int = 0

    def __post_init__(self) -> None:
        # Checked as the record is read (a frozen, hashable value: the plans are cached on it);
        # any sequence of cluster counts is stored as a tuple.
        counts, sms = _checks.device_fields("DeviceFacts", self)
        object.__setattr__(self, "short_topk_clusters", counts)
        object.__setattr__(self, "sm_count", sms)


# An H200 (SM90, 132 SMs) as the dispatch sees it; the cluster counts are what its occupancy
# calculator reported (scripts/probes/short_topk_clusters.py).
H200 = DeviceFacts("gpu", "9.0", (132, 66, 39, 30, 22, 17, 15, 15), 132)

_simulated: contextvars.ContextVar[DeviceFacts | None] = contextvars.ContextVar(
    "dsv41_jax_simulated_device", default=None
)


@contextlib.contextmanager
def simulated_device(facts: DeviceFacts) -> Iterator[DeviceFacts]:
    """Trace as on the device `facts` describes, on any machine: every dispatch decision reads
    `facts` instead of the real device, and the FFI targets are registered without touching a
    GPU. Nothing can run on a simulated device (an op run eagerly inside, or under an eager
    `vmap`, raises ValueError where its kernel is not this machine's): use it with abstract
    tracing (`dsv41_jax.info.explain`, `jax.eval_shape`) or cross-platform lowering
    (`jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))`). E.g.
    `with simulated_device(H200): dsv41_jax.info.explain(...)`."""
    if not isinstance(facts, DeviceFacts):
        raise TypeError(f"facts must be a DeviceFacts, got {type(facts).__name__}")
    token = _simulated.set(facts)
    try:
        yield facts
    finally:
        _simulated.reset(token)


def check_runs_here(what: str) -> None:
    """ValueError where `what` (an op's kernel) would run now, eagerly, on a simulated device
    other than this machine's: `simulated_device` only traces (JAX would otherwise fail deep
    in the kernel's compilation for this backend). Traced calls (`jax.eval_shape`, `jit`,
    `info.explain`, lowering for another platform) pass."""
    simulated = _simulated.get()
    if simulated is None:
        return
    here = str(getattr(jax.devices()[0], "compute_capability", ""))
    if (simulated.backend, simulated.compute_capability) == (jax.default_backend(), here):
        return
    # Staged (a jaxpr is being built) iff a fresh constant is a tracer; eagerly (vmap and grad
    # included) it is a concrete array and the kernel would run now.
    if isinstance(jnp.zeros((), jnp.int32), jax.core.Tracer):
        return
    raise ValueError(
        f"{what} cannot run on this {jax.default_backend()} machine: simulated_device"
        f"({simulated.backend} {simulated.compute_capability or '?'}) only traces; call it "
        "under jax.eval_shape, dsv41_jax.info.explain or jax.jit(...).trace(...).lower("
        "lowering_platforms=('cuda',)), or outside simulated_device"
    )


def facts() -> DeviceFacts:
    """The facts of the device the ops trace for: the simulated one inside `simulated_device`,
    else the first device JAX reports (read once)."""
    simulated = _simulated.get()
    return simulated if simulated is not None else _real_facts()


@functools.cache
def _real_facts() -> DeviceFacts:
    dev = jax.devices()[0]
    cc = str(getattr(dev, "compute_capability", ""))
    clusters: tuple[int, ...] = ()
    if jax.default_backend() == "gpu":
        warn_unverified_jax()
        if available() and cc in PORTABLE:
            register_ffi_targets()  # the occupancy calculator reads the prepared kernels
            clusters = tuple(_occupancy(c) for c in range(1, limit("short_topk_max_cluster") + 1))
    return DeviceFacts(jax.default_backend(), cc, clusters, int(getattr(dev, "core_count", 0) or 0))


@functools.cache
def warn_unverified_jax() -> None:
    """A WARNING on the `dsv41_jax` logger, once per process, where the installed jax is not
    one the GPU test suite has passed on (`status.GPU_VERIFIED_JAX`). Called where the ops
    first read a real GPU device; never on other backends."""
    if not status.jax_gpu_verified(jax.__version__):
        logging.getLogger("dsv41_jax").warning(
            "jax %s: the dsv41_jax GPU kernels have been verified on jax %s only (the GPU "
            "tests have not run on this version)",
            jax.__version__,
            ", ".join(status.GPU_VERIFIED_JAX),
        )


def backend() -> str:
    """JAX's backend as the dispatch sees it (the simulated device's inside `simulated_device`)."""
    facts = _simulated.get()
    return facts.backend if facts is not None else jax.default_backend()


def compute_capability() -> str:
    """The first GPU's compute capability as "major.minor" ("" when unknown)."""
    facts = _simulated.get()
    if facts is not None:
        return facts.compute_capability
    return str(getattr(jax.devices()[0], "compute_capability", ""))


def sm_count() -> int:
    """The first GPU's streaming multiprocessors as JAX reports them (0 when unknown)."""
    facts = _simulated.get()
    if facts is not None:
        return facts.sm_count
    return int(getattr(jax.devices()[0], "core_count", 0) or 0)


def gpu_declines(op: str, archs: tuple[str, ...], backend: str, cc: str) -> str | None:
    """Why `op`'s FFI kernels, built for the compute capabilities `archs`, cannot run on a
    device of JAX backend `backend` and compute capability `cc` (None: they can)."""
    loaded = _load()
    if isinstance(loaded, str):
        return loaded
    if backend != "gpu":
        return f"{op}: the FFI implementation needs a CUDA GPU backend"
    if cc not in archs:
        return (
            f"{op}: no kernel image for compute capability {cc or 'unknown'} (built for "
            f"{', '.join(archs)})"
        )
    return None


def require_gpu(op: str, archs: tuple[str, ...] = PORTABLE) -> None:
    """Raise ExtensionUnavailable unless the extension is built, JAX runs on a CUDA GPU and the
    extension holds machine code for its compute capability (`archs`), checked at trace time (a
    wrapper called directly, or run by a plan made for another device, fails here and not at run
    time; the plans read the same checks ahead, `_device.ffi_declines`); then register the
    targets.

    Wrappers never pass a zero-size operand to a custom call (they return early or decline):
    XLA's GPU compile of such a call inside an eager `jax.shard_map` over several GPUs crashes
    the process (scripts/probes/eager_shard_map_ffi.py, seen on 2 H200s with jax 0.11.2).
    """
    why = gpu_declines(op, archs, backend(), compute_capability())
    if why is not None:
        raise ExtensionUnavailable(why)
    register_ffi_targets()
