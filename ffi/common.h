// Shared aliases and helpers of the dsv41_jax XLA FFI handlers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "smxx_launch.cuh"  // PerDevice, CurrentDeviceAttribute
#include "xla/ffi/api/ffi.h"

namespace dsv41 {

namespace ffi = xla::ffi;

using Stream = ffi::PlatformStream<cudaStream_t>;
template <ffi::DataType T>
using Buffer = ffi::Buffer<T>;
template <ffi::DataType T>
using Result = ffi::ResultBuffer<T>;

// Every handler only launches on XLA's stream and allocates nothing: CUDA-graph capturable.
inline constexpr auto kCmdBuffer = {ffi::Traits::kCmdBufferCompatible};

// The Prepare step of an SM100-only handler: on an SM100 device run `set` (its kernels'
// attributes) and record per device whether it succeeded, which the handler checks; on any other
// device there is nothing to set (the handler refuses there).
template <class Set>
cudaError_t PrepareOnSm100(PerDevice& prepared, Set set) {
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor) != 10) return cudaSuccess;
  const cudaError_t err = set();
  prepared.Record(err == cudaSuccess);
  return err;
}

inline ffi::Error InvalidArgument(const char* op, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(op) + ": " + what);
}

// The handler side of PrepareOnSm100: refuses on a device it did not prepare.
inline ffi::Error RequireSm100(const PerDevice& prepared, const char* op) {
  if (prepared.Current()) return ffi::Error::Success();
  return InvalidArgument(op, "needs an SM100 (Blackwell) GPU: this kernel is sm_100a only");
}

inline ffi::Error CudaStatus(const char* op, cudaError_t err) {
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string(op) + ": " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

inline ffi::Error LastCudaError(const char* op) { return CudaStatus(op, cudaGetLastError()); }

}  // namespace dsv41
