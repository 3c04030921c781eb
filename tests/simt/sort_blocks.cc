// The candidate-table sort kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include <cstddef>
#include <cstdint>
#include <utility>

namespace dsv41 {
namespace {
// The kernel's `extern __shared__` buffer: one per CTA (OS thread), aligned as on the GPU.
alignas(128) thread_local uint32_t bitmap[65536];
}  // namespace
std::pair<void*, std::size_t> SortBlocksSharedMemory() { return {bitmap, sizeof(bitmap)}; }
}  // namespace dsv41

#include "smxx_sort_blocks.cu"
