// Shared aliases and helpers of the dsv41_jax XLA FFI handlers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

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

inline ffi::Error InvalidArgument(const char* op, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(op) + ": " + what);
}

inline ffi::Error CudaStatus(const char* op, cudaError_t err) {
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string(op) + ": " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

inline ffi::Error LastCudaError(const char* op) { return CudaStatus(op, cudaGetLastError()); }

}  // namespace dsv41
