// One CUDA source file per translation unit of the stand-in: this defines the kernel's
// `extern __shared__` array (named `name`, as in the kernel) for the kernel's anonymous
// namespace, one per CTA (OS thread), 128-byte aligned as on the GPU, and `accessor()` returning
// it so a harness can fill it with garbage before each CTA starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#define SIMT_SHARED_BUFFER(name, accessor)                                  \
  namespace dsv41 {                                                         \
  namespace {                                                               \
  alignas(128) thread_local uint32_t name[65536];                           \
  }                                                                         \
  std::pair<void*, std::size_t> accessor() { return {name, sizeof(name)}; } \
  }
