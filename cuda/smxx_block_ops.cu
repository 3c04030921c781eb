// Block scores and sparse-column mapping for the fused indexer layers.
#include "smxx_block_ops.cuh"

#include <cmath>

#include "smxx_launch.cuh"

namespace dsv41 {
namespace {

constexpr int kBlockOpThreads = 256;

// One thread per (row, block): the block's B scores are contiguous, so a warp reads 32 adjacent
// blocks.
__global__ void __launch_bounds__(kBlockOpThreads)
    BlockAmaxKernel(const float* __restrict__ scores, int64_t stride, int64_t n,
                    const int32_t* __restrict__ lens, int32_t block_size, bool pin_newest,
                    float* __restrict__ out, int64_t nb) {
  const int64_t row = blockIdx.y;
  const int64_t b = int64_t(blockIdx.x) * kBlockOpThreads + threadIdx.x;
  if (b >= nb) return;
  const int64_t raw = lens[row];
  const int64_t len = raw < 0 ? 0 : (raw > n ? n : raw);
  const int64_t nblocks = (len + block_size - 1) / block_size;
  float best = -INFINITY;
  if (pin_newest && b == nblocks - 1) {
    best = INFINITY;
  } else if (b < nblocks) {
    const int64_t lo = b * block_size, hi = lo + block_size < len ? lo + block_size : len;
    const float* s = scores + row * stride;
    for (int64_t p = lo; p < hi; ++p) {
      const float v = s[p];
      if (v > best) best = v;  // false for NaN: NaN is never a block score
    }
  }
  out[row * nb + b] = best;
}

__global__ void __launch_bounds__(kBlockOpThreads)
    ColumnsToPositionsKernel(const int32_t* __restrict__ columns,
                             const int32_t* __restrict__ blocks, int64_t total, int64_t k,
                             int64_t c, int32_t block_size, int32_t* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * kBlockOpThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kBlockOpThreads) {
    const int64_t row = i / k;
    const int32_t col = columns[i];
    int32_t pos = -1;
    if (col >= 0 && col / block_size < c) {
      pos = blocks[row * c + col / block_size] * block_size + col % block_size;
    }
    out[i] = pos;
  }
}

}  // namespace

void LaunchBlockAmax(const float* scores, int64_t stride, int64_t n, const int32_t* lens,
                     int64_t rows, int32_t block_size, bool pin_newest, float* out, int64_t nb,
                     cudaStream_t stream) {
  if (rows == 0 || nb == 0) return;
  const dim3 grid(unsigned((nb + kBlockOpThreads - 1) / kBlockOpThreads), unsigned(rows));
  LaunchKernel(BlockAmaxKernel, grid, dim3(kBlockOpThreads), 0, stream, 0, scores, stride, n, lens,
               block_size, pin_newest, out, nb);
}

void LaunchColumnsToPositions(const int32_t* columns, const int32_t* blocks, int64_t rows,
                              int64_t k, int64_t c, int32_t block_size, int32_t* out,
                              cudaStream_t stream) {
  const int64_t total = rows * k;
  if (total == 0) return;
  const int64_t ctas = (total + kBlockOpThreads - 1) / kBlockOpThreads;
  LaunchKernel(ColumnsToPositionsKernel, dim3(unsigned(ctas < 65535 ? ctas : 65535)),
               dim3(kBlockOpThreads), 0, stream, 0, columns, blocks, total, k, c, block_size, out);
}

}  // namespace dsv41
