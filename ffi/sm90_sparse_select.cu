// The SM90 sparse consumer's select in one kernel (sm90_sparse_select.h): a row's logits never
// leave the chip.
//
// A row is a cluster of `cl` CTAs (1-16, one an SM), CTA r over a contiguous chunk of the row's
// 64-column tiles. Phase 1 scores them as the logits kernel does (sm90_sparse_tiles.cuh: the same
// instructions, so the same logits bitwise), four math warpgroups taking the staged tiles in turn
// from four producer warps, and stores each logit's key into rank 0's shared memory (a 16K-column
// row is 64 KB); phase 2 is rank 0's exact select over the row's keys
// (cuda/smxx_onchip_select.cuh). No logits are written, no second kernel reads them, and the
// column-to-position map is the select's output step.
#include <cooperative_groups.h>

#include <algorithm>

#include "sm90_sparse_select.h"
#include "sm90_sparse_tiles.cuh"
#include "smxx_launch.cuh"
#include "smxx_onchip_select.cuh"
#include "smxx_phase_stamps.cuh"

namespace dsv41 {
namespace {

namespace cg = cooperative_groups;
using namespace sparse_tiles;

constexpr uint32_t kMathGroups = 4;  // and as many producer warps, producer g feeding group g
constexpr uint32_t kStages = 16;     // a multiple of kMathGroups: a stage always feeds one group
constexpr uint32_t kThreads = kMathGroups * (kMathThreads + 32);
constexpr uint32_t kRowTiles = onchip::kMaxRow / kTile;  // most tiles a row
static_assert(kStages % kMathGroups == 0);

// Dynamic shared memory: the ring (whose buffers the select's histograms reuse once the tiles
// are scored), then the CTA's pass-1 counts, uint32 [onchip::kFirstWords] (rank 0's the row's),
// the row's keys, uint32 [row_tiles * 64] (rank 0's hold the row), the row's blocks, int32
// [row_tiles * 8] (rank 0's: the select's output maps through them), then the chunk's slots,
// int32 [chunk_tiles * 8]. Blocks and slots staged once: neither the producers nor the select's
// output wait on a global load.
template <uint32_t kHeads>
using Smem = Ring<kHeads, kStages>;
static_assert(sizeof(onchip::Shared) <= sizeof(Smem<32>::kv));

template <uint32_t kHeads>
constexpr size_t SmemBytes(uint32_t row_tiles, uint32_t chunk_tiles) {
  return sizeof(Smem<kHeads>) +
         (onchip::kFirstWords + size_t(row_tiles) * (kTile + kBlocksPerTile) +
          chunk_tiles * kBlocksPerTile) *
             4 +
         1024;
}
static_assert(SmemBytes<64>(kRowTiles, kRowTiles) <= 227 * 1024, "one CTA an SM");

template <uint32_t kHeads>
__global__ void __launch_bounds__(kThreads, 1)
    SparseSelectKernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ kv,
                       int64_t num_pages, const float* __restrict__ weights,
                       const int32_t* __restrict__ physical, const int32_t* __restrict__ valid_lens,
                       const int32_t* __restrict__ blocks, int32_t* __restrict__ out, uint32_t c,
                       uint32_t chunk_tiles, int32_t k) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  auto& s = AlignedRing<Smem<kHeads>>(smem_raw);
  uint32_t* counts = reinterpret_cast<uint32_t*>(&s + 1);
  uint32_t* keys = counts + onchip::kFirstWords;
  int32_t* row_blocks = reinterpret_cast<int32_t*>(keys + c * kBlock);
  int32_t* slots = row_blocks + c;
  const cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const uint32_t row = blockIdx.x / uint32_t(cl), row_cols = c * kBlock;
  const uint32_t len = uint32_t(min(max(valid_lens[row], 0), int32_t(row_cols)));
  const uint32_t first = uint32_t(rank) * chunk_tiles;
  const uint32_t last = min(first + chunk_tiles, CeilDiv(len, kTile));
  const uint32_t tiles = last > first ? last - first : 0;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  DSV41_STAMP(0);
  // Peers store into rank 0's shared memory only once every CTA of the cluster started (and
  // zeroed its counts).
  for (uint32_t i = threadIdx.x; i < onchip::kFirstWords; i += kThreads) counts[i] = 0;
  if (cl > 1) cluster.barrier_arrive();
  const int32_t* row_slots = physical + uint64_t(row) * c + first * kBlocksPerTile;
  for (uint32_t i = threadIdx.x; i < tiles * kBlocksPerTile; i += kThreads) slots[i] = row_slots[i];
  if (rank == 0) {
    const int32_t* b = blocks + uint64_t(row) * c;
    for (uint32_t i = threadIdx.x; i < CeilDiv(len, kBlock); i += kThreads) row_blocks[i] = b[i];
  }
  if (threadIdx.x == kMathGroups * kMathThreads) InitRing(s, kMathThreads);
  __syncthreads();
  if (cl > 1) cluster.barrier_wait();
  DSV41_STAMP(1);
  if (tiles > 0 && warp >= kMathGroups * 4) {
    const uint32_t group = warp - kMathGroups * 4;
    ProduceTiles(s, q + uint64_t(row) * kHeads * kHeadDim, group == 0, kv, num_pages, slots, tiles,
                 group, kMathGroups, lane);
  } else if (tiles > 0) {  // math group warp / 4 takes tiles warp / 4, + kMathGroups, ...
    const Scorer<kHeads> scorer(weights + uint64_t(row) * kHeads, warp, lane);
    reinterpret_cast<Barrier*>(&s.q_full)->wait(0);
    uint32_t* chunk_keys = onchip::RowKeys(cluster, keys, rank, int64_t(first) * kTile);
    for (uint32_t i = warp / 4; i < tiles; i += kMathGroups) {
      float v0, v1;
      scorer.Score(s, i % kStages, (i / kStages) & 1, lane, v0, v1);
      if (lane % 4 == 0) {  // the quad holds one value
        uint32_t* tile = chunk_keys + i * kTile + scorer.sub_warp;
        const uint32_t key0 = onchip::KeyOfLogit(v0), key1 = onchip::KeyOfLogit(v1);
        tile[scorer.v0_at] = key0;
        tile[scorer.v1_at] = key1;
        // Only the row's columns count: the last tile's past `len` are not the row's.
        const uint32_t col = (first + i) * kTile + scorer.sub_warp;
        if (col + scorer.v0_at < len) onchip::CountKey(counts, key0);
        if (col + scorer.v1_at < len) onchip::CountKey(counts, key1);
      }
      if (i == 0) DSV41_STAMP(2);
    }
  }
  DSV41_STAMP(3);
  // Once every tile of the row is scored (the ring's buffers free): rank 0 selects.
  auto& select = *reinterpret_cast<onchip::Shared*>(&s.kv[0][0]);
  onchip::SelectRow<int(kThreads)>(select, keys, counts, int32_t(len), cluster, cl, rank, k,
                                   row_blocks, out + uint64_t(row) * uint32_t(k));
#endif
}

PerDevice g_num_sms;                                // recorded by PrepareSparseSelectSm90
PerDevice g_max_clusters[onchip::kMaxCluster + 1];  // [cl]: clusters of cl CTAs at once

// The cluster a row (0: the row is too wide): the most CTAs that all rows' clusters run at once
// in one wave (one CTA an SM) with two tiles or more each, then the fewest CTAs that keep the
// same chunk (the row's time is its largest chunk's).
int ClusterSize(int64_t rows, uint32_t row_tiles, int num_sms) {
  if (row_tiles > kRowTiles) return 0;
  int cl = 1;
  for (int c = 2; c <= onchip::kMaxCluster; ++c) {
    if (rows * c <= num_sms && row_tiles >= uint32_t(2 * c) &&
        g_max_clusters[c].Current() >= rows) {
      cl = c;
    }
  }
  return int(CeilDiv(row_tiles, CeilDiv(row_tiles, uint32_t(cl))));
}

}  // namespace

int32_t SparseSelectClusterSize(int64_t rows, int64_t c) {
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0 || rows <= 0 || c <= 0 || c % kBlocksPerTile != 0) return 0;
  return ClusterSize(rows, uint32_t(c / kBlocksPerTile), num_sms);
}

int64_t SparseSelectMaxColumns() { return onchip::kMaxRow; }

ffi::Error LaunchSm90SparseSelect(const char* op, cudaStream_t stream, const Sm90SparseLogits& c,
                                  const int32_t* blocks, int32_t k, int32_t* out) {
  if (c.rows == 0) return ffi::Error::Success();
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0) {
    return ffi::Error::Internal(std::string(op) + ": device not prepared (dsv41_jax._ext.prepare)");
  }
  const uint32_t row_tiles = uint32_t(c.c) / kBlocksPerTile;
  const int cl = ClusterSize(c.rows, row_tiles, num_sms);
  if (cl == 0) {
    return InvalidArgument(op, "the on-chip select takes rows of at most " +
                                   std::to_string(SparseSelectMaxColumns()) + " columns");
  }
  const uint32_t chunk_tiles = CeilDiv(row_tiles, uint32_t(cl));
  const auto kernel = c.heads == 32 ? SparseSelectKernel<32> : SparseSelectKernel<64>;
  const size_t smem =
      c.heads == 32 ? SmemBytes<32>(row_tiles, chunk_tiles) : SmemBytes<64>(row_tiles, chunk_tiles);
  return CudaStatus(
      op, LaunchKernel(kernel, dim3(unsigned(c.rows * cl)), dim3(kThreads), smem, stream,
                       unsigned(cl), static_cast<const uint8_t*>(c.q), c.kv, c.num_pages, c.weights,
                       c.physical, c.valid_lens, blocks, out, uint32_t(c.c), chunk_tiles, k));
}

cudaError_t PrepareSparseSelectSm90() {
  g_num_sms.Record(CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount));
  if (g_num_sms.Current() == 0) return cudaErrorInvalidDevice;
  const size_t smem = SmemBytes<64>(kRowTiles, kRowTiles);
  for (auto kernel : {SparseSelectKernel<32>, SparseSelectKernel<64>}) {
    if (cudaError_t e = SetMaxDynamicSmem(smem, kernel); e != cudaSuccess) return e;
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
  }
  // Occupancy with the largest chunk: one CTA an SM whatever the chunk.
  for (int cl = 1; cl <= onchip::kMaxCluster; ++cl) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(cl));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {unsigned(cl), 1, 1};
    config.attrs = attr;
    config.numAttrs = 1;
    int count = 0;
    if (cudaOccupancyMaxActiveClusters(&count, SparseSelectKernel<64>, &config) != cudaSuccess) {
      cudaGetLastError();
      count = 0;
    }
    g_max_clusters[cl].Record(count);
  }
  return cudaSuccess;
}

}  // namespace dsv41
