// The on-chip select of the SM90 sparse consumer (cuda/smxx_onchip_select.cuh), compiled for the
// CPU stand-in (cuda_runtime.h) behind a test kernel: the GPU kernel (ffi/sm90_sparse_select.cu)
// scores its keys with WGMMA, which the stand-in has not, so this one makes them from given scores
// with the same key function, stores them where the GPU kernel does and calls the same select.
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(dyn, OnChipSelectSharedMemory)

#include <cooperative_groups.h>

#include <vector>

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

// Part p of a row (a CTA of its cluster, or of `parts` CTAs without one): the keys of the row's
// columns [p * chunk, + chunk) (poison past the row's length) stored into rank 0's keys after an
// onchip::Shared and the CTA's pass-1 counts (a split row's into its own and into `split_keys`),
// and counted (those of the row's columns only), as the GPU kernel does, then the select (a split
// row's by its last part, onchip::JoinSplitRow).
template <int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads, 1)
    OnChipSelectKernel(const float* scores, const int32_t* lens, const int32_t* blocks,
                       int32_t* out, int64_t n, int64_t nblocks, int64_t chunk, int32_t k,
                       int parts, uint32_t* split_keys, uint32_t* split_counts) {
  extern __shared__ uint32_t dyn[];  // dynamic: the CPU stand-in starts it as garbage
  onchip::Shared& sh = *reinterpret_cast<onchip::Shared*>(dyn);
  uint32_t* counts = reinterpret_cast<uint32_t*>(&sh + 1);
  uint32_t* keys = counts + onchip::kFirstWords;
  const cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const bool split = parts > 1;
  const int64_t row = blockIdx.x / unsigned(split ? parts : cl);
  const int part = split ? int(blockIdx.x % unsigned(parts)) : rank;
  const int64_t row_keys = int64_t(split ? parts : cl) * chunk;
  const int64_t len = min(max(int64_t(lens[row]), int64_t(0)), n);
  const float* s = scores + row * n;
  for (int i = threadIdx.x; i < onchip::kFirstWords; i += kBlockThreads) counts[i] = 0;
  if (cl > 1) {
    cluster.sync();  // every CTA started (its counts zeroed): peers may store into rank 0's
  } else {
    __syncthreads();
  }
  uint32_t* mine = onchip::RowKeys(cluster, keys, rank, int64_t(part) * chunk);
  for (int64_t i = threadIdx.x; i < chunk; i += kBlockThreads) {
    const int64_t col = int64_t(part) * chunk + i;
    const uint32_t key = col < len ? onchip::KeyOfLogit(s[col]) : Poison(row, part, i);
    mine[i] = key;
    if (split) split_keys[row * row_keys + col] = key;
    if (col < len) onchip::CountKey(counts, key);
  }
  if (split && !onchip::JoinSplitRow<kBlockThreads>(
                   {split_keys + row * row_keys, split_counts + row * onchip::kSplitWords}, keys,
                   counts, int32_t(len), int32_t(part * chunk), int32_t((part + 1) * chunk),
                   unsigned(parts))) {
    return;
  }
  onchip::SelectRow<kBlockThreads>(sh, keys, counts, int32_t(len), cluster, cl, rank, k,
                                   blocks + row * nblocks, out + row * int64_t(k));
}

}  // namespace

// rows x n float scores, lens [rows] (clamped to [0, n]), blocks [rows, nblocks] (nblocks * 8 >=
// n) -> out [rows, k]: each row's top-k as positions blocks[col / 8] * 8 + col % 8, in column
// order, -1 padded; a row is a cluster of `cl` CTAs (1-16) of whole 64-column tiles, or (cl < -1)
// -cl CTAs without a cluster meeting in global memory.
cudaError_t LaunchOnChipSelectForTest(const float* scores, const int32_t* lens,
                                      const int32_t* blocks, int32_t* out, int64_t rows, int64_t n,
                                      int64_t nblocks, int32_t k, int cl) {
  const int parts = cl < -1 ? -cl : 1;
  if ((parts == 1 && (cl < 1 || cl > onchip::kMaxCluster)) || rows < 0 || n < 0 || k < 1 ||
      nblocks * 8 < n)
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int64_t ctas = parts > 1 ? parts : cl;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t chunk = max((tiles + ctas - 1) / ctas, int64_t(1)) * kTile;
  if (n > onchip::kMaxRow) return cudaErrorInvalidValue;
  // The split's keys by column, and its counts and tickets, zeroed as the GPU launcher does.
  std::vector<uint32_t> split_keys(parts > 1 ? rows * ctas * chunk : 0);
  std::vector<uint32_t> split_counts(parts > 1 ? rows * onchip::kSplitWords : 0, 0u);
  const size_t smem = sizeof(onchip::Shared) + (onchip::kFirstWords + size_t(ctas * chunk)) * 4;
  return LaunchKernel(OnChipSelectKernel<kThreads>, dim3(unsigned(rows * ctas)), dim3(kThreads),
                      smem, nullptr, unsigned(parts > 1 ? 0 : cl), scores, lens, blocks, out, n,
                      nblocks, chunk, k, parts, split_keys.data(), split_counts.data());
}

}  // namespace dsv41
