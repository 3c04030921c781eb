"""Shared fixtures: GPU tests skip without a CUDA backend; every test gets a fresh seed."""

from __future__ import annotations

import jax
import numpy as np
import pytest

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
