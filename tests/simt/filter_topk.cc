// The filter-first top-k kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include <cstddef>
#include <cstdint>
#include <utility>

namespace dsv41 {
namespace {
// The kernel's `extern __shared__` buffer: one per CTA (OS thread), aligned as on the GPU.
alignas(128) thread_local uint32_t dyn[65536];
}  // namespace
std::pair<void*, std::size_t> FilterTopkSharedMemory() { return {dyn, sizeof(dyn)}; }
}  // namespace dsv41

#include "smxx_filter_topk.cu"
