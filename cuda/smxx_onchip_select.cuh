// The exact top-k of one row whose keys sit in shared memory: the select of the SM90 sparse
// consumer, which scores a row's candidate columns over a cluster of CTAs and never writes them
// out (ffi/sm90_sparse_select.cu). Each CTA of the row's cluster stores its columns' keys into
// rank 0's shared memory (RowKeys), so the row's keys (at most kMaxRow) meet in one CTA, which
// selects alone (SelectRow): one cluster barrier a row, where a select spread over the cluster
// pays two for each digit pass. A column is selected by its key (topk::OrderedKey, 0 = never),
// ties by lower column, and written as the position its candidate block maps to.
//   - three digit passes (11, 11 and 10 bits) of histograms find the k-th key, as in the short
//     select (smxx_short_topk.cu); pass 1's counts made by the CTAs as they score (CountKey),
//     each pass's bin found by one warp (FindBin);
//   - once pass 1's digit is known, each warp keeps the columns of its candidates (its keys at
//     or above the k-th key's pass-1 bin, Candidates), and passes 2 and 3 and the output read
//     only those;
//   - the output, in column order, from ballots over each warp's candidates; where every key
//     equal to the k-th one is taken (the usual case), one ballot a step and no tie counts.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_block_scan.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_topk_keys.cuh"

namespace dsv41 {
namespace onchip {

constexpr int kBins = 2048;  // the widest digit: 11 bits
constexpr int kMaxCluster = 16;
constexpr int32_t kMaxRow = 16384;  // keys a row: the output counts pack in 16 bits

constexpr int kGroups = kBins / 32;  // counts of 32 digits each, beside the digits' (FindBin)

struct Shared {
  uint32_t hist[2][kBins + kGroups];  // passes 2 and 3 (pass 1's are the cluster's, CountKey)
  int32_t warp_sums[32];
  int32_t total;               // the keys that may be selected (pass 1's)
  int32_t bin, above, in_bin;  // the pass's digit, the keys above its bin, the keys in it
  int32_t list[kMaxRow];       // the warps' candidates (Candidates): warp w's from its first key
};

// The words of a CTA's pass-1 counts (CountKey): two 16-bit counts a word, then the groups'.
constexpr int kFirstWords = kBins / 2 + kGroups;

// Every CTA of a row's cluster counts its own columns' keys by their top 11 bits (pass 1's digit)
// while it scores them, into `counts` [kFirstWords] of its shared memory (zeroed before the
// cluster's first barrier), and SelectRow adds the peers' counts into rank 0's: a row's pass 1
// costs its select one scan. A bin's count is its half of word digit / 2, high for odd digits: no
// bin of a row holds more than kMaxRow keys, so the halves never carry into each other.
__device__ __forceinline__ void CountKey(uint32_t* counts, uint32_t key) {
  if (key != topk::kExcluded) {
    atomicAdd(&counts[key >> 22], 1u << ((key >> 17) & 16));
    atomicAdd(&counts[kBins / 2 + (key >> 26)], 1u);
  }
}

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
  int32_t bin, above, in_bin;
};

// How many keys a thread of a kThreads-thread CTA holds: warp w takes the row's keys
// [w * seg, (w + 1) * seg), lane l those at l, l + 32, ... of it (seg <= 32 * kSteps).
template <int kThreads>
constexpr int kSteps = (kMaxRow + kThreads - 1) / kThreads;

// The count of digit d in h: one a word, or two (kPacked: CountKey's layout).
template <bool kPacked>
__device__ __forceinline__ int32_t CountOf(const uint32_t* h, int d) {
  if constexpr (kPacked) return int32_t((h[d >> 1] >> ((d & 1) * 16)) & 0xffffu);
  return int32_t(h[d]);
}

// One warp finds the digit of h's kDigits that holds the k_rem-th largest key counted (k_rem >=
// 1; none past the keys counted), from `groups` [kDigits / 32], the counts of the digits
// [32 g, 32 g + 32): a warp scan over the groups, descending, finds the group, a second over
// its 32 digits the digit. Writes the digit, the keys above it and in it to sh; returns the keys
// counted. No block barrier, where a scan of the bins over the CTA pays three.
template <int kDigits, bool kPacked>
__device__ __forceinline__ int32_t FindBin(Shared& sh, const uint32_t* h, const uint32_t* groups,
                                           int32_t k_rem) {
  constexpr int kSub = kDigits / 32 / 32;  // groups a lane
  static_assert(kSub == 1 || kSub == 2);
  const int lane = int(threadIdx.x) % 32;
  const int top = kDigits / 32 - 1 - lane * kSub;  // the lane's groups top - [0, kSub)
  int32_t c[kSub], mine = 0;
#pragma unroll
  for (int j = 0; j < kSub; ++j) c[j] = int32_t(groups[top - j]), mine += c[j];
  const int32_t inclusive = WarpInclusiveScan(mine);
  const int32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
  int group = -1;
  int32_t above = inclusive - mine, group_above = 0;
#pragma unroll
  for (int j = 0; j < kSub; ++j) {
    if (above < k_rem && k_rem <= above + c[j]) group = top - j, group_above = above;
    above += c[j];
  }
  const uint32_t hit = __ballot_sync(0xffffffffu, group >= 0);
  if (hit == 0) return total;
  const int src = __ffs(int(hit)) - 1;
  group = __shfl_sync(0xffffffffu, group, src);
  group_above = __shfl_sync(0xffffffffu, group_above, src);
  const int d = group * 32 + 31 - lane;  // descending over the lanes
  const int32_t count = CountOf<kPacked>(h, d);
  const int32_t digit_above = group_above + WarpInclusiveScan(count) - count;
  if (digit_above < k_rem && k_rem <= digit_above + count) {
    sh.bin = d, sh.above = digit_above, sh.in_bin = count;
  }
  return total;
}

// Column i of a row whose columns are its candidate blocks' positions, eight a block.
struct BlockPositions {
  const int32_t* __restrict__ blocks;
  __device__ __forceinline__ int32_t operator()(int32_t i) const {
    return blocks[i / 8] * 8 + i % 8;
  }
};

// Where a select's output goes (SelectFromFirst's `Out`): Put(slot, i) for the row's slot-th
// selected column i (slots ascending with the column), Pad(slot) for each slot past the keys
// there are, and Finish(n), by one thread, once n = min(keys, k) is known. This one: out[slot]
// = position(i), -1 padded.
template <class Position>
struct PositionsOut {
  Position position;
  int32_t* __restrict__ out;
  __device__ __forceinline__ void Put(int32_t slot, int32_t i) const { out[slot] = position(i); }
  __device__ __forceinline__ void Pad(int32_t slot) const { out[slot] = -1; }
  __device__ __forceinline__ void Finish(int32_t) const {}
};

// Unpacked pass-1 counts (kBins words, a digit's count each, then kGroups words): the groups' from
// the digits', one warp a group (the warps divide the groups: the short select's 1024-thread
// CTA; the sparse consumer counts packed, CountKey). Every thread of the CTA calls it once the
// digits' are complete; the groups' are complete after the CTA's next barrier.
template <int kThreads>
__device__ __forceinline__ void SumGroups(uint32_t* counts) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kGroups % kWarps == 0, "as many groups a warp");
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
#pragma unroll
  for (int i = 0; i < kGroups / kWarps; ++i) {
    const int g = warp + i * kWarps;
    const uint32_t sum = __reduce_add_sync(0xffffffffu, counts[32 * g + lane]);
    if (lane == 0) counts[kBins + g] = sum;
  }
}

// The columns of a warp's candidates: its keys at or above `lowest` (>= 1), in column order,
// into sh.list from `lo` (the warp's first column: a warp's candidates never outgrow its keys).
// Returns how many (every lane).
template <int kThreads>
__device__ __forceinline__ int32_t Candidates(Shared& sh, const uint32_t (&key)[kSteps<kThreads>],
                                              int32_t lo, uint32_t lowest) {
  const int lane = int(threadIdx.x) % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  int32_t count = 0;
#pragma unroll
  for (int j = 0; j < kSteps<kThreads>; ++j) {
    const bool take = key[j] >= lowest;
    const uint32_t taken = __ballot_sync(0xffffffffu, take);
    if (take) sh.list[lo + count + __popc(taken & lanes_below)] = lo + 32 * j + lane;
    count += __popc(taken);
  }
  __syncwarp();  // the warp's lanes read each other's
  return count;
}

// One digit pass over the warp's candidates (`count` columns from sh.list + lo) whose keys' bits
// above kShift + kWidth equal `prefix`: the bin holding the k_rem-th largest of them, the keys
// above that bin and in it. Every thread of the CTA calls it; the pass's histogram is zero.
template <int kShift, int kWidth>
__device__ __forceinline__ Digit DigitPass(Shared& sh, const uint32_t* keys, int32_t lo,
                                           int32_t count, uint32_t prefix, int32_t k_rem) {
  constexpr int kDigits = 1 << kWidth;
  static_assert(kDigits <= kBins && kShift + kWidth < 32);
  uint32_t* h = sh.hist[kShift == 10 ? 0 : 1];
  for (int32_t t = int32_t(threadIdx.x % 32); t < count; t += 32) {
    const uint32_t key = keys[sh.list[lo + t]];
    const uint32_t d = (key >> kShift) & (kDigits - 1);
    if ((key >> (kShift + kWidth)) == prefix)
      atomicAdd(&h[d], 1u), atomicAdd(&h[kBins + d / 32], 1u);
  }
  __syncthreads();
  DSV41_STAMP(kShift == 10 ? 11 : 12);
  if (threadIdx.x < 32) FindBin<kDigits, false>(sh, h, h + kBins, k_rem);
  __syncthreads();
  return Digit{sh.bin, sh.above, sh.in_bin};
}

// The output in column order, from each warp's candidates (`count` columns from sh.list + lo):
// those above the k-th key `thresh`, and (kTies) the first `need` > 0 equal to it. Each warp's
// counts of both (above | equal << 16: a row's stay below 2^15 each) and one barrier give the
// warp its first slots. A column i goes to its slot through out.Put.
template <bool kTies, class Out>
__device__ __forceinline__ void Emit(Shared& sh, const uint32_t* keys, int32_t lo, int32_t count,
                                     uint32_t thresh, int32_t need, const Out& out) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const auto column = [&](int32_t t) { return t < count ? sh.list[lo + t] : -1; };
  const auto key_of = [&](int32_t col) { return col >= 0 ? keys[col] : topk::kExcluded; };
  // The lanes whose candidate is above the k-th key, and equal to it (never a key 0).
  const auto above = [&](uint32_t key) { return __ballot_sync(0xffffffffu, key > thresh); };
  const auto equal = [&](uint32_t key) {
    return kTies ? __ballot_sync(0xffffffffu, key == thresh) : 0u;
  };
  int32_t counts = 0;
  for (int32_t t0 = 0; t0 < count; t0 += 32) {
    const uint32_t key = key_of(column(t0 + lane));
    counts += __popc(above(key)) | __popc(equal(key)) << 16;
  }
  DSV41_STAMP(13);
  if (lane == 0) sh.warp_sums[warp] = counts;
  __syncthreads();
  const int32_t before =
      int32_t(__reduce_add_sync(0xffffffffu, lane < warp ? uint32_t(sh.warp_sums[lane]) : 0u));
  int32_t g0 = before & 0xffff, e0 = before >> 16;  // the slots before the lanes' candidates
  DSV41_STAMP(8);
  for (int32_t t0 = 0; t0 < count; t0 += 32) {
    const int32_t i = column(t0 + lane);
    const uint32_t key = key_of(i), gt = above(key), eq = equal(key);
    const int32_t g = g0 + __popc(gt & lanes_below);
    if constexpr (kTies) {
      const int32_t e = e0 + __popc(eq & lanes_below);
      if ((gt >> lane) & 1u) {
        out.Put(g + min(e, need), i);
      } else if (((eq >> lane) & 1u) && e < need) {
        out.Put(g + e, i);
      }
    } else if ((gt >> lane) & 1u) {
      out.Put(g, i);
    }
    g0 += __popc(gt), e0 += __popc(eq);
  }
}

// A warp's keys in registers in the consumer's layout: lane l's key j is the row's column
// lo + 32 j + l, the warp's columns [lo, hi) of the row's n (loaded before pass 1's digit is
// found); the candidates kept from sh.list + lo (Candidates).
template <int kThreads>
struct StridedKeys {
  int32_t lo;
  uint32_t key[kSteps<kThreads>];
  __device__ __forceinline__ StridedKeys(const uint32_t* keys, int32_t n) {
    constexpr int kWarps = kThreads / 32;
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int32_t seg = (n + 32 * kWarps - 1) / (32 * kWarps) * 32;
    lo = min(warp * seg, n);
    const int32_t hi = min(lo + seg, n);
#pragma unroll
    for (int j = 0; j < kSteps<kThreads>; ++j) {
      const int32_t i = lo + 32 * j + lane;
      key[j] = i < hi ? keys[i] : topk::kExcluded;
    }
  }
  __device__ __forceinline__ int32_t Keep(Shared& sh, uint32_t lowest) const {
    return Candidates<kThreads>(sh, key, lo, lowest);
  }
};

// Pass 1's result over a row: the keys that may be selected (`total`) and, where total > k, the
// digit (top 11 bits) of the k-th key, the keys in the digits above it and in it.
struct First {
  int32_t total, bin, above, in_bin;
  // The candidates' lowest key: the k-th key's bin and above (every key that may be selected
  // where total <= k).
  __device__ __forceinline__ uint32_t Lowest(int32_t k) const {
    return total > k ? max(uint32_t(bin) << 21, 1u) : 1u;
  }
  // How many keys are candidates (the keys >= Lowest(k)).
  __device__ __forceinline__ int32_t Candidates(int32_t k) const {
    return total > k ? above + in_bin : total;
  }
};

// The row's top-k once pass 1's digit is known (`first`, for k >= 1): its k best columns in
// column order through `out` (PositionsOut: out[0, k) = their positions position(col), -1 past
// the keys there are). `keys` are the row's by column; `mine` the thread's keys, whose warp keeps
// its candidates from sh.list + mine.lo (`mine.Keep(sh, lowest)`: its keys >= lowest, in column
// order; the warps' columns ascending with the warp); sh.hist zero. Every thread of the CTA calls
// it. Passes 2 and 3 and the output read only the candidates (about k plus the k-th key's pass-1
// bin: ~1K of a 16K-column row).
template <int kThreads, class Keys, class Out>
__device__ __forceinline__ void SelectFromFirst(Shared& sh, const uint32_t* keys, const Keys& mine,
                                                int32_t k, const First& first, const Out& out) {
  // ---- the k-th key: keys above `thresh` are taken, and the first `need` keys equal to it
  int32_t k_rem = k, need = 0;
  uint32_t thresh = 0, prefix = 0;
  const int32_t total = first.total;
  const uint32_t lowest = first.Lowest(k);
  if (total > k) {
    prefix = uint32_t(first.bin);
    k_rem -= first.above;
    thresh = topk::Below(prefix << 21);
  }
  const bool more = total > k && first.in_bin != k_rem;  // not every key of the bin taken
  const int32_t lo = mine.lo, count = mine.Keep(sh, lowest);
  DSV41_STAMP(14);
  if (more) {
    const Digit d1 = DigitPass<10, 11>(sh, keys, lo, count, prefix, k_rem);
    DSV41_STAMP(6);
    prefix = (prefix << 11) | uint32_t(d1.bin);
    k_rem -= d1.above;
    if (d1.in_bin == k_rem) {
      thresh = topk::Below(prefix << 10);
    } else {
      const Digit d2 = DigitPass<0, 10>(sh, keys, lo, count, prefix, k_rem);
      DSV41_STAMP(7);
      thresh = (prefix << 10) | uint32_t(d2.bin);
      need = k_rem - d2.above;
      // Every key equal to the k-th one taken: no ties to count (keys 0 are never counted).
      if (need == d2.in_bin) thresh -= 1, need = 0;
    }
  }
  if (need == 0) {
    Emit<false>(sh, keys, lo, count, thresh, need, out);
  } else {
    Emit<true>(sh, keys, lo, count, thresh, need, out);
  }
  for (int32_t i = min(total, k) + int32_t(threadIdx.x); i < k; i += kThreads) out.Pad(i);
  if (threadIdx.x == 0) out.Finish(min(total, k));
  DSV41_STAMP(9);
}

// The row's top-k (SelectFromFirst) from its pass-1 counts: `counts` in CountKey's packed layout
// (kPacked), or kBins words then kGroups (SumGroups). Every thread of the CTA calls it.
template <int kThreads, bool kPacked, class Keys, class Out>
__device__ void SelectToPositions(Shared& sh, const uint32_t* keys, const uint32_t* counts,
                                  const Keys& mine, int32_t k, const Out& out) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps <= 32, "one warp adds the warps' counts");
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  if (warp == 0) {  // pass 1's digit while the other warps zero the histograms
    const int32_t total =
        FindBin<kBins, kPacked>(sh, counts, counts + (kPacked ? kBins / 2 : kBins), k);
    if (lane == 0) sh.total = total;
  }
  constexpr int kWords = 2 * (kBins + kGroups);  // a trip count known: no remainder loop
#pragma unroll
  for (int i = 0; i < kWords / kThreads; ++i) (&sh.hist[0][0])[int(threadIdx.x) + i * kThreads] = 0;
  if (int(threadIdx.x) < kWords % kThreads) {
    (&sh.hist[0][0])[kWords / kThreads * kThreads + int(threadIdx.x)] = 0;
  }
  DSV41_STAMP(10);
  __syncthreads();
  DSV41_STAMP(5);
  SelectFromFirst<kThreads>(sh, keys, mine, k, First{sh.total, sh.bin, sh.above, sh.in_bin}, out);
}

// Once every CTA of the row's cluster (of `cl`) stored its keys through RowKeys and counted them
// into its `counts` (CountKey): the peers add their counts into rank 0's, and rank 0 selects the
// row (SelectToPositions over `keys`, n of them); the other CTAs return at once. Every thread of
// every CTA of the cluster calls it.
template <int kThreads>
__device__ void SelectRow(Shared& sh, const uint32_t* keys, uint32_t* counts, int32_t n,
                          const cooperative_groups::cluster_group& cluster, int cl, int rank,
                          int32_t k, const int32_t* blocks, int32_t* out) {
  __syncthreads();  // this CTA's counts complete
  if (cl > 1) {
    if (rank != 0) {
      uint32_t* to = cluster.map_shared_rank(counts, 0);
      for (int i = int(threadIdx.x); i < kFirstWords; i += kThreads) {
        if (counts[i] != 0) atomicAdd(&to[i], counts[i]);
      }
    }
    cluster.sync();
  }
  DSV41_STAMP(4);
  if (rank == 0) {
    SelectToPositions<kThreads, true>(sh, keys, counts, StridedKeys<kThreads>(keys, n), k,
                                      PositionsOut<BlockPositions>{BlockPositions{blocks}, out});
  }
}

}  // namespace onchip
}  // namespace dsv41
