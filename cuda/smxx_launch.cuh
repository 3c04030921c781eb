// One launch helper for the project's kernels (any SM): cudaLaunchKernelEx with an optional
// cluster shape. (The CPU stand-in of tests/simt/ implements this call, so every kernel launched
// through it also runs there.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// `kernel<<<grid, block, smem, stream>>>(args...)`, in clusters of `cluster` CTAs along x when
// `cluster` > 0. Returns the launch's error.
template <class Kernel, class... Args>
cudaError_t LaunchKernel(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         unsigned cluster, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  if (cluster > 0) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// Raises each kernel's dynamic shared memory limit to `bytes`; stops at the first error. A
// one-time set-up call: never while a stream is being captured.
template <class... Kernels>
cudaError_t SetMaxDynamicSmem(size_t bytes, Kernels... kernels) {
  cudaError_t err = cudaSuccess;
  ((err = err == cudaSuccess ? cudaFuncSetAttribute(
                                   kernels, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes))
                             : err),
   ...);
  return err;
}

}  // namespace dsv41
