// The on-chip select of the SM90 sparse consumer (cuda/smxx_onchip_select.cuh), compiled for the
// CPU stand-in (cuda_runtime.h) behind a test kernel: the GPU kernel (ffi/sm90_sparse_select.cu)
// scores its keys with WGMMA, which the stand-in has not, so this one makes them from given scores
// with the same key function, stores them where the GPU kernel does and calls the same select.
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(dyn, OnChipSelectSharedMemory)

#include <cooperative_groups.h>

#include "smxx_launch.cuh"
#include "smxx_onchip_select.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 640;  // the GPU kernel's block: four math warpgroups, four warps
constexpr int64_t kTile = 64;  // its chunks are whole 64-column tiles

// Keys past a row's length: above every key of a logit (those of NaN payloads, which KeyOfLogit
// never produces), so a select that reads one takes it first.
__device__ __forceinline__ uint32_t Poison(int64_t row, int rank, int64_t i) {
  uint64_t h = (uint64_t(row) << 40) ^ (uint64_t(rank) << 32) ^ uint64_t(i);
  h *= 0x9E3779B97F4A7C15ull;
  return 0xFF800001u | uint32_t(h >> 41);
}

// CTA `rank` of row blockIdx.x / cl: the keys of the row's columns [rank * chunk, + chunk) (poison
// past the row's length) stored into rank 0's keys after an onchip::Shared and the CTA's pass-1
// counts, and counted (those of the row's columns only), as the GPU kernel does, then the select.
template <int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads, 1)
    OnChipSelectKernel(const float* scores, const int32_t* lens, const int32_t* blocks,
                       int32_t* out, int64_t n, int64_t nblocks, int64_t chunk, int32_t k) {
  extern __shared__ uint32_t dyn[];  // dynamic: the CPU stand-in starts it as garbage
  onchip::Shared& sh = *reinterpret_cast<onchip::Shared*>(dyn);
  uint32_t* counts = reinterpret_cast<uint32_t*>(&sh + 1);
  uint32_t* keys = counts + onchip::kFirstWords;
  const cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / unsigned(cl);
  const int64_t len = min(max(int64_t(lens[row]), int64_t(0)), n);
  const float* s = scores + row * n;
  for (int i = threadIdx.x; i < onchip::kFirstWords; i += kBlockThreads) counts[i] = 0;
  if (cl > 1) {
    cluster.sync();  // every CTA started (its counts zeroed): peers may store into rank 0's
  } else {
    __syncthreads();
  }
  uint32_t* mine = onchip::RowKeys(cluster, keys, rank, int64_t(rank) * chunk);
  for (int64_t i = threadIdx.x; i < chunk; i += kBlockThreads) {
    const int64_t col = int64_t(rank) * chunk + i;
    const uint32_t key = col < len ? onchip::KeyOfLogit(s[col]) : Poison(row, rank, i);
    mine[i] = key;
    if (col < len) onchip::CountKey(counts, key);
  }
  onchip::SelectRow<kBlockThreads>(sh, keys, counts, int32_t(len), cluster, cl, rank, k,
                                   blocks + row * nblocks, out + row * int64_t(k));
}

}  // namespace

// rows x n float scores, lens [rows] (clamped to [0, n]), blocks [rows, nblocks] (nblocks * 8 >=
// n) -> out [rows, k]: each row's top-k as positions blocks[col / 8] * 8 + col % 8, in column
// order, -1 padded; a row is a cluster of `cl` CTAs (1-16) of whole 64-column tiles.
cudaError_t LaunchOnChipSelectForTest(const float* scores, const int32_t* lens,
                                      const int32_t* blocks, int32_t* out, int64_t rows, int64_t n,
                                      int64_t nblocks, int32_t k, int cl) {
  if (cl < 1 || cl > onchip::kMaxCluster || rows < 0 || n < 0 || k < 1 || nblocks * 8 < n)
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t chunk = max((tiles + cl - 1) / cl, int64_t(1)) * kTile;
  if (n > onchip::kMaxRow) return cudaErrorInvalidValue;
  const size_t smem = sizeof(onchip::Shared) + (onchip::kFirstWords + size_t(cl * chunk)) * 4;
  return LaunchKernel(OnChipSelectKernel<kThreads>, dim3(unsigned(rows * cl)), dim3(kThreads), smem,
                      nullptr, unsigned(cl), scores, lens, blocks, out, n, nblocks, chunk, k);
}

}  // namespace dsv41
