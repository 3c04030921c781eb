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

// A launch configuration of `grid` CTAs of `block` threads with `smem` bytes of dynamic shared
// memory, in clusters of `cluster` CTAs along x when `cluster` > 0, with programmatic stream
// serialization when `pdl` (it owns the attributes its config points to, hence no copies).
struct ClusterConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[2] = {};
  ClusterConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, unsigned cluster,
                bool pdl = false) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    unsigned n = 0;
    if (cluster > 0) {
      attr[n].id = cudaLaunchAttributeClusterDimension;
      attr[n].val.clusterDim.x = cluster;
      attr[n].val.clusterDim.y = 1;
      attr[n].val.clusterDim.z = 1;
      ++n;
    }
    if (pdl) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    config.attrs = n > 0 ? attr : nullptr;
    config.numAttrs = n;
  }
  ClusterConfig(const ClusterConfig&) = delete;
  ClusterConfig& operator=(const ClusterConfig&) = delete;
};

// `kernel<<<grid, block, smem, stream>>>(args...)`, in clusters of `cluster` CTAs along x when
// `cluster` > 0. Returns the launch's error.
template <class Kernel, class... Args>
cudaError_t LaunchKernel(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         unsigned cluster, Args... args) {
  const ClusterConfig c(grid, block, smem, stream, cluster);
  return cudaLaunchKernelEx(&c.config, kernel, args...);
}

// The same, as a programmatic dependent launch (PDL): its CTAs may start once every CTA of the
// grid before it in the stream called LaunchDependentGrid (smxx_pdl.cuh) or exited, so its
// launch overlaps that grid's tail. `kernel` calls WaitPrimaryGrid before it reads anything
// earlier work wrote. Inside an XLA command buffer, capture turns it into a programmatic edge.
template <class Kernel, class... Args>
cudaError_t LaunchDependentKernel(Kernel kernel, dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, Args... args) {
  const ClusterConfig c(grid, block, smem, stream, 0, true);
  return cudaLaunchKernelEx(&c.config, kernel, args...);
}

// How many clusters of `cluster` CTAs of `kernel` (`threads` a CTA, `smem` bytes of dynamic
// shared memory) the current device runs at once, by the CUDA occupancy calculator (GPCs bound
// clusters, not only SMs); 0 when it cannot tell. A set-up call (a Prepare function, after the
// kernel's shared memory limit is raised): never while a stream is captured.
template <class Kernel>
int MaxActiveClusters(Kernel kernel, int cluster, int threads, size_t smem) {
  const ClusterConfig c(dim3(unsigned(cluster)), dim3(unsigned(threads)), smem, nullptr,
                        unsigned(cluster));
  int count = 0;
  if (cudaOccupancyMaxActiveClusters(&count, kernel, &c.config) != cudaSuccess) {
    cudaGetLastError();  // cleared, so that no later launch reports it
    return 0;
  }
  return count;
}

// Whether a launch of `rows` clusters runs in one wave, per device: the clusters of 1, 2, 4, ...
// CTAs of one kernel that run at once and the SM count, recorded by a Prepare function.
class ClusterWaves {
 public:
  static constexpr int kSizes = 5;  // clusters of 1, 2, 4, 8 and 16 CTAs
  template <class Kernel>
  void Record(Kernel kernel, int threads, size_t smem, int max_cluster) {
    sms_.Record(CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount));
    for (int i = 0; i < kSizes && (1 << i) <= max_cluster; ++i) {
      at_once_[i].Record(MaxActiveClusters(kernel, 1 << i, threads, smem));
    }
  }
  // `rows` clusters of `cluster` CTAs (a power of two) at once: by the occupancy calculator's
  // count where one was recorded, else at most one CTA an SM, and no limit where neither is
  // known (the CPU stand-in).
  bool OneWave(int64_t rows, int cluster) const {
    const int i = Log2(cluster);
    const int at_once = i < kSizes ? at_once_[i].Current() : 0;
    if (at_once > 0) return rows <= at_once;
    const int sms = sms_.Current();
    return sms == 0 || rows * cluster <= sms;
  }
  // The SM count recorded (0: unknown).
  int Sms() const { return sms_.Current(); }

 private:
  static int Log2(int cluster) {
    int i = 0;
    while ((2 << i) <= cluster) ++i;
    return i;
  }
  PerDevice sms_;
  PerDevice at_once_[kSizes];
};

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
