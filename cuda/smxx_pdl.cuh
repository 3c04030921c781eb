// Programmatic dependent launch (PDL, sm_90 and later), the kernel side of LaunchDependentKernel
// (smxx_launch.cuh). Outside a device compilation (the host pass, the CPU stand-in of
// tests/simt/) they do nothing: the stand-in runs a launch's grids one after another.
#pragma once

#include <cuda_runtime.h>

namespace dsv41 {

// PDL, in a grid launched with the programmatic-serialization attribute (LaunchDependentKernel):
// waits until the grid before it in the stream has finished and its writes are visible. A no-op
// in a grid launched without the attribute.
__device__ __forceinline__ void WaitPrimaryGrid() {
#if defined(__CUDA_ARCH__)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// PDL, in the grid before: lets the next grid (launched with the attribute) start its CTAs as
// SMs free up, once every CTA of this grid has called it or exited. The next grid still waits
// (WaitPrimaryGrid) before it reads what this one wrote.
__device__ __forceinline__ void LaunchDependentGrid() {
#if defined(__CUDA_ARCH__)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace dsv41
