// One launch helper for the project's kernels (any SM): cudaLaunchKernelEx with an optional
// cluster shape, and the per-device facts launches read. (The CPU stand-in of tests/simt/
// implements these calls, so every kernel launched through them also runs there.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// A per-device value a launch needs (an SM count, "attributes set"), recorded for the current
// device by a Prepare function: launches themselves must not query or configure the device,
// which is illegal while XLA captures the stream into a CUDA graph. 0 = not prepared.
class PerDevice {
 public:
  static constexpr int kMaxDevices = 64;
  void Record(int value) {
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < kMaxDevices) {
      values_[device] = value;
    }
  }
  int Current() const {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return 0;
    return values_[device];
  }

 private:
  int values_[kMaxDevices] = {};
};

// An attribute of the current device (compute capability major, SM count, ...), or 0 when it
// cannot be read.
inline int CurrentDeviceAttribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    return 0;
  }
  return value;
}

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
