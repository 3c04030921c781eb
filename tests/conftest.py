"""Shared fixtures: GPU tests skip without a CUDA backend; every test gets a fresh seed."""

from __future__ import annotations

import contextlib
import os
import zlib

# Eight host devices for the multi-device tests (must precede JAX's backend start; harmless to
# every other test, which uses device 0).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _summary import pytest_terminal_summary  # noqa: E402, F401 - skips grouped by reason

jax.config.update("jax_enable_x64", False)


def _has_gpu() -> bool:
    try:
        return jax.default_backend() == "gpu"
    except RuntimeError:
        return False


def _has_sm100() -> bool:
    return _has_gpu() and str(getattr(jax.devices()[0], "compute_capability", "")).startswith("10.")


def pytest_collection_modifyitems(config, items):
    gpu, sm100 = _has_gpu(), _has_sm100()
    no_gpu = pytest.mark.skip(
        reason="needs an NVIDIA GPU (JAX CUDA backend) with the CUDA extension built; none here"
    )
    no_sm100 = pytest.mark.skip(
        reason="needs an SM100 (Blackwell) NVIDIA GPU with the CUDA extension built; none here"
    )
    for item in items:
        if "sm100" in item.keywords and not sm100:
            item.add_marker(no_sm100)
        elif "gpu" in item.keywords and not gpu:
            item.add_marker(no_gpu)


@pytest.fixture
def rng(request) -> np.random.Generator:
    # Fresh per test, seeded from its name (a stable hash: Python's `hash` of a str changes with
    # every process), so every run draws the same inputs and a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def simt_topk(tmp_path_factory):
    """The top-k kernels' CUDA source built for the CPU stand-in (tests/simt/)."""
    from selection import build_emulator

    return build_emulator(tmp_path_factory.mktemp("simt"))


@pytest.fixture
def simulated_h200():
    """Trace as on an H200 on any machine (`dsv41_jax.info.simulated_device(H200)`): the GPU
    backend, compute capability 9.0, the measured short-select occupancy. Needs the built
    extension (its limits and target names); nothing runs, so use it with abstract tracing or
    cross-platform lowering only."""
    from dsv41_jax import _ext, info

    if not _ext.available():
        pytest.skip("needs the built CUDA extension")
    with info.simulated_device(info.H200):
        yield


@pytest.fixture
def simulate():
    """`simulate(facts)`: trace as on the device `facts` (a `dsv41_jax.info.DeviceFacts`) for the
    rest of the test. Needs the built extension; nothing runs on a simulated device."""
    from dsv41_jax import _ext, info

    if not _ext.available():
        pytest.skip("needs the built CUDA extension")
    with contextlib.ExitStack() as stack:
        yield lambda facts: stack.enter_context(info.simulated_device(facts))
