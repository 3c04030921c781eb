"""What the Pallas Mosaic GPU implementations share: the GPU gate."""

from __future__ import annotations

from dsv41_jax import _ext


def require_gpu(op: str) -> None:
    """Decline (NotImplementedError) off a GPU backend: the kernels run only there (their SIMT
    programs run on the CPU through `dsv41_jax._simt.Emulator`, for tests)."""
    if _ext.backend() != "gpu":
        raise NotImplementedError(f"{op} pallas: the Mosaic GPU kernel needs a CUDA GPU backend")
