// The exact top-k of one row whose keys sit in shared memory: the select of the SM90 sparse
// consumer, which scores a row's candidate columns over a cluster of CTAs and never writes them
// out (ffi/sm90_sparse_select.cu). Each CTA of the row's cluster stores its columns' keys into
// rank 0's shared memory (RowKeys), so the row's keys (at most kMaxRow) meet in one CTA, which
// selects alone (SelectRow): one cluster barrier a row, where a select spread over the cluster
// pays two for each digit pass. A column is selected by its key (topk::OrderedKey, 0 = never),
// ties by lower column, and written as the position its candidate block maps to.
//   - three digit passes (11, 11 and 10 bits) of histograms find the k-th key, as in the short
//     select (smxx_short_topk.cu);
//   - the output, in column order, from ballots over each warp's consecutive keys and one
//     block scan;
//   - each thread's keys (kSteps) in registers from the start.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_block_scan.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_topk_keys.cuh"

namespace dsv41 {
namespace onchip {

constexpr int kBins = 2048;        // the widest digit: 11 bits
constexpr int kScanThreads = 256;  // threads holding a pass's bins in its scan (8 each at most)
constexpr int kMaxCluster = 16;
constexpr int32_t kMaxRow = 16384;  // keys a row: the output counts pack in 16 bits

struct Shared {
  uint32_t hist[3][kBins];  // one per pass: zeroed once, at the start, never refilled
  int32_t warp_sums[32];
  int32_t scan_total;
  int32_t bin, above, in_bin;  // the pass's digit, the keys above its bin, the keys in it
};

// The key a logit is selected by: never NaN or -inf.
__device__ __forceinline__ uint32_t KeyOfLogit(float v) {
  return (v != v || v == -INFINITY) ? topk::kExcluded : topk::OrderedKey(v);
}

// Where CTA `rank` of the row's cluster stores the key of the row's column `col`: in rank 0's
// `keys`, which holds the whole row. A peer stores only after every CTA of the cluster started
// (a cluster barrier), and SelectRow's barrier makes the stores visible to rank 0.
__device__ __forceinline__ uint32_t* RowKeys(const cooperative_groups::cluster_group& cluster,
                                             uint32_t* keys, int rank, int64_t col) {
  return (rank == 0 ? keys : cluster.map_shared_rank(keys, 0)) + col;
}

struct Digit {
  int32_t bin, above, in_bin, total;
};

// How many keys a thread of a kThreads-thread CTA holds: warp w takes the row's keys
// [w * seg, (w + 1) * seg), lane l those at l, l + 32, ... of it (seg <= 32 * kSteps).
template <int kThreads>
constexpr int kSteps = (kMaxRow + kThreads - 1) / kThreads;

// One digit pass over the keys whose bits above kShift + kWidth equal `prefix`: the bin holding
// the k_rem-th largest of them, the keys above that bin and in it, and how many keys took part.
// Every thread of the CTA calls it with its own keys.
template <int kThreads, int kShift, int kWidth>
__device__ __forceinline__ Digit DigitPass(Shared& sh, const uint32_t (&key)[kSteps<kThreads>],
                                           uint32_t prefix, int32_t k_rem) {
  constexpr int kDigits = 1 << kWidth, kPer = kDigits / kScanThreads;
  constexpr int kPass = kShift == 21 ? 0 : kShift == 10 ? 1 : 2;
  static_assert(kDigits <= kBins && kPer >= 1 && kThreads >= kScanThreads);
  uint32_t* h = sh.hist[kPass];
#pragma unroll
  for (int j = 0; j < kSteps<kThreads>; ++j) {
    bool in = key[j] != topk::kExcluded;
    if constexpr (kShift + kWidth < 32) in = in && (key[j] >> (kShift + kWidth)) == prefix;
    if (in) atomicAdd(&h[(key[j] >> kShift) & (kDigits - 1)], 1u);
  }
  __syncthreads();
  // Thread t < kScanThreads holds digits kDigits - 1 - t * kPer - j, descending: its exclusive
  // scan is the count of keys in the bins above its own.
  int32_t c[kPer], mine = 0;
  const bool scans = int(threadIdx.x) < kScanThreads;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int d = kDigits - 1 - (int(threadIdx.x) * kPer + j);
    c[j] = scans ? int32_t(h[d]) : 0, mine += c[j];
  }
  int32_t above = BlockExclusiveScan<kThreads>(mine, sh.warp_sums, &sh.scan_total);
  if (scans) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (above < k_rem && k_rem <= above + c[j]) {
        sh.bin = kDigits - 1 - (int(threadIdx.x) * kPer + j);
        sh.above = above, sh.in_bin = c[j];
      }
      above += c[j];
    }
  }
  __syncthreads();
  return Digit{sh.bin, sh.above, sh.in_bin, sh.scan_total};
}

// The largest key below the bin that starts at `lo` (keys 0 are never taken, so 0 for lo = 0).
__device__ __forceinline__ uint32_t Below(uint32_t lo) { return lo == 0 ? 0 : lo - 1; }

// The row's top-k: out[0, k) = the positions blocks[col / 8] * 8 + col % 8 of its k best columns
// in column order, -1 past the keys there are. `keys` [0, n) are the row's (n <= kMaxRow),
// `blocks` and `out` the row's; k >= 1 (the caller checks). Every thread of the CTA calls it.
// Each thread loads its keys once into registers (DigitPass inlined, so they stay there): no
// pass and no output sweep reads a key again.
template <int kThreads>
__device__ void SelectToPositions(Shared& sh, const uint32_t* keys, int32_t n, int32_t k,
                                  const int32_t* __restrict__ blocks, int32_t* __restrict__ out) {
  constexpr int kWarps = kThreads / 32, kN = kSteps<kThreads>;
  static_assert(kThreads % 32 == 0 && kWarps <= 32 && kN <= 32, "a lane keeps a step's counts");
  constexpr int32_t kBlock = 8;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int32_t seg = (n + 32 * kWarps - 1) / (32 * kWarps) * 32;
  const int32_t lo = min(warp * seg, n), hi = min(lo + seg, n);
  uint32_t key[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int32_t i = lo + 32 * j + lane;
    key[j] = i < hi ? keys[i] : topk::kExcluded;
  }
  for (int i = int(threadIdx.x); i < 3 * kBins; i += kThreads) (&sh.hist[0][0])[i] = 0;
  __syncthreads();

  // ---- the k-th key: keys above `thresh` are taken, and the first `need` keys equal to it
  int32_t k_rem = k, need = 0;
  uint32_t thresh = 0;
  const Digit d0 = DigitPass<kThreads, 21, 11>(sh, key, 0, k_rem);
  DSV41_STAMP(5);
  const int32_t total = d0.total;  // keys that may be selected
  if (total > k) {
    uint32_t prefix = uint32_t(d0.bin);
    k_rem -= d0.above;
    if (d0.in_bin == k_rem) {
      thresh = Below(prefix << 21);
    } else {
      const Digit d1 = DigitPass<kThreads, 10, 11>(sh, key, prefix, k_rem);
      DSV41_STAMP(6);
      prefix = (prefix << 11) | uint32_t(d1.bin);
      k_rem -= d1.above;
      if (d1.in_bin == k_rem) {
        thresh = Below(prefix << 10);
      } else {
        const Digit d2 = DigitPass<kThreads, 0, 10>(sh, key, prefix, k_rem);
        DSV41_STAMP(7);
        thresh = (prefix << 10) | uint32_t(d2.bin);
        need = k_rem - d2.above;
      }
    }
  }

  // ---- output slots in column order. Lane j keeps the counts of the warp's step j (keys
  // lo + 32 j + [0, 32)), above | equal << 16 (a row's counts stay below 2^15 each).
  const uint32_t lanes_below = (1u << lane) - 1u;
  // The warp's lanes whose key of step j is above the k-th key, and equal to it where ties count.
  const auto above = [&](int j) { return __ballot_sync(0xffffffffu, key[j] > thresh); };
  const auto equal = [&](int j) {
    return __ballot_sync(0xffffffffu, need > 0 && key[j] == thresh);
  };
  const auto position = [&](int32_t i) { return blocks[i / kBlock] * kBlock + i % kBlock; };
  int32_t step_counts = 0;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int32_t c = __popc(above(j)) | __popc(equal(j)) << 16;
    if (lane == j) step_counts = c;
  }
  int32_t steps_before = step_counts;  // inclusive, then exclusive, over the warp's steps
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t y = __shfl_up_sync(0xffffffffu, steps_before, d);
    if (lane >= d) steps_before += y;
  }
  // Only lane 31 contributes the warp's counts: every thread's exclusive scan is the sum over
  // the warps before its own.
  const int32_t warps_before =
      BlockExclusiveScan<kThreads>(lane == 31 ? steps_before : 0, sh.warp_sums, &sh.scan_total);
  steps_before += warps_before - step_counts;
  DSV41_STAMP(8);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const uint32_t gt = above(j), eq = equal(j);
    const int32_t before = __shfl_sync(0xffffffffu, steps_before, j);
    const int32_t g = (before & 0xffff) + __popc(gt & lanes_below);
    const int32_t e = (before >> 16) + __popc(eq & lanes_below);
    const int32_t i = lo + 32 * j + lane;
    if ((gt >> lane) & 1u) {
      out[g + min(e, need)] = position(i);
    } else if (((eq >> lane) & 1u) && e < need) {
      out[g + e] = position(i);
    }
  }
  for (int32_t i = min(total, k) + int32_t(threadIdx.x); i < k; i += kThreads) out[i] = -1;
  DSV41_STAMP(9);
}

// Once every CTA of the row's cluster (of `cl`) stored its keys through RowKeys: rank 0 selects
// the row (SelectToPositions over `keys`, n of them); the other CTAs return at once. Every thread
// of every CTA of the cluster calls it.
template <int kThreads>
__device__ void SelectRow(Shared& sh, const uint32_t* keys, int32_t n,
                          const cooperative_groups::cluster_group& cluster, int cl, int rank,
                          int32_t k, const int32_t* blocks, int32_t* out) {
  if (cl > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  DSV41_STAMP(4);
  if (rank == 0) SelectToPositions<kThreads>(sh, keys, n, k, blocks, out);
}

}  // namespace onchip
}  // namespace dsv41
