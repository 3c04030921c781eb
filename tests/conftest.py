"""Shared fixtures: GPU tests skip without a CUDA backend; every test gets a fresh seed."""

from __future__ import annotations

import os

# Eight host devices for the multi-device tests (must precede JAX's backend start; harmless to
# every other test, which uses device 0).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def _has_gpu() -> bool:
    try:
        return jax.default_backend() == "gpu"
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords or "sm100" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request) -> np.random.Generator:
    # Fresh per test (seeded from its name, so a failure reproduces), different across tests.
    return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)
