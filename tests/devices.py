"""The devices the CPU tests simulate (`dsv41_jax.info.simulated_device`, the `simulate`
fixture, `dsv41_jax.plan.device_record(facts)`): the H200 as measured, other SM90 parts, a
Blackwell part, a GPU without a kernel image, and the CPU."""

from __future__ import annotations

from dsv41_jax import info

H200 = info.H200
CPU = info.DeviceFacts("cpu", "")
# SM90 parts other than the H200's 132 SMs: the same kernels, fewer clusters of the short-row
# select at once (clusters of 1, 2, ... 8 CTAs).
SM114 = info.DeviceFacts("gpu", "9.0", (114, 57, 38, 28, 22, 19, 16, 14), 114)
SM78 = info.DeviceFacts("gpu", "9.0", (78, 39, 26, 19, 15, 13, 11, 9), 78)
SM100 = info.DeviceFacts("gpu", "10.0", (), 148)  # a Blackwell part as the dispatch sees it
SM80 = info.DeviceFacts("gpu", "8.0", (4, 2))  # no kernel image of the extension
