// Exact top-k: each row is split over a cluster of up to 16 CTAs. Scores become order-preserving
// 32-bit keys (0 = never selected); four 8-bit radix passes find the k-th key T, each pass
// building per-CTA shared-memory histograms that the cluster sums through distributed shared
// memory. A chunk of up to 16K keys is cached in shared memory. After the first pass, chunks of
// up to 8K keys (in place) and longer uncached ones (when they fit) are compacted, in position
// order, to their keys in or above the chosen bucket: later passes, the counts and the emission
// walk only those. Then every CTA emits, in position order, its keys above T and the first ties
// at T (ties ranked by position across the cluster), at offsets known from the CTAs before it.
// Deterministic: counts are order-independent and the emission order is the position order.
#include <cooperative_groups.h>

#include "smxx_bitmap.cuh"
#include "smxx_block_scan.cuh"
#include "smxx_cluster_topk.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_radix_digit.cuh"
#include "smxx_topk_keys.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 512;
constexpr int kPerThread = 8;                 // consecutive elements per thread per round
constexpr int kTile = kThreads * kPerThread;  // elements per round (one load batch)
constexpr int kWarps = kThreads / 32;
constexpr int64_t kCachedKeys = 16384;           // a chunk up to this size keeps its keys in smem
constexpr int64_t kCompacted = kCachedKeys / 2;  // (key, position) pairs kept after pass 0
constexpr int kMaxCluster = 16;
constexpr size_t kMaxTopkSmem = 200 * 1024;  // set once by PrepareClusterTopk (not under capture)

struct Shared {
  uint32_t warp_hist[kWarps][kRadixBins];  // per-warp histograms: contention stays inside a warp
  uint32_t hist[2][kRadixBins];  // this CTA's sum, read by the cluster; double-buffered by pass
  int32_t warp_sums[kThreads / 32];
  int32_t scan_total;
  RadixState radix;
  int32_t counts[2];  // this CTA's (gt, eq), read by the cluster for the emission offsets
  int32_t out_base, eq_before, total;  // this CTA's first output slot and tie rank; row total
};

using topk::kExcluded;

// The keys a CTA's passes, counts and emission walk, in position order: its chunk cached in
// shared memory, the (key, position) pairs kept after the first pass, or the chunk in global
// memory. T: the score type (float or topk::Bf16).
template <class T>
struct KeyList {
  topk::Row<T> r;
  int64_t mine;          // the chunk's elements
  int64_t len;           // the list's entries
  bool aligned, cached;  // 16-byte aligned chunk; chunk keys in shared memory
  bool compacted;        // the list is the kept pairs
  uint32_t* keys;        // cached or kept keys
  int32_t* kept_pos;     // kept positions

  // Keys of this thread's kPerThread consecutive entries of the round starting at `base`.
  __device__ __forceinline__ void Round(const TopkArgs& a, int64_t base,
                                        uint32_t (&kk)[kPerThread]) const {
    const int64_t i0 = base + int64_t(threadIdx.x) * kPerThread;
    if (!cached && !compacted) {
      topk::LoadKeys<kPerThread>(a, r, mine, i0, aligned, kk);
    } else if (i0 + kPerThread <= len) {  // 16-byte shared loads: no bank conflicts
      const uint4* src = reinterpret_cast<const uint4*>(keys + i0);
      const uint4 q0 = src[0], q1 = src[1];
      kk[0] = q0.x, kk[1] = q0.y, kk[2] = q0.z, kk[3] = q0.w;
      kk[4] = q1.x, kk[5] = q1.y, kk[6] = q1.z, kk[7] = q1.w;
    } else {
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) kk[j] = i0 + j < len ? keys[i0 + j] : kExcluded;
    }
  }
  __device__ __forceinline__ int32_t Position(int64_t i) const {
    return compacted ? kept_pos[i] : int32_t(r.lo + i);
  }
};

// The chunk's candidate bitmap from the row's member block ids (any order, duplicates fine).
template <class T>
__device__ __forceinline__ void BuildMemberBits(const TopkArgs& a, int64_t row, topk::Row<T>& r,
                                                uint32_t* bits) {
  r.member_base = r.lo / a.block_size;
  const int64_t b_hi = (r.hi + a.block_size - 1) / a.block_size;
  MarkIds<kThreads>(bits, r.member_base, b_hi, a.members + row * a.num_members, a.num_members);
  r.member_bits = bits;
}

// The chunk's keys into shared memory (chunks of at most kCachedKeys).
template <class List>
__device__ __forceinline__ void CacheChunk(const TopkArgs& a, const List& list) {
  for (int64_t base = 0; base < list.mine; base += kTile) {
    uint32_t kk[kPerThread];
    const int64_t i0 = base + int64_t(threadIdx.x) * kPerThread;
    topk::LoadKeys<kPerThread>(a, list.r, list.mine, i0, list.aligned, kk);
    if (i0 + kPerThread <= list.mine) {
      uint4* dst = reinterpret_cast<uint4*>(list.keys + i0);
      dst[0] = make_uint4(kk[0], kk[1], kk[2], kk[3]);
      dst[1] = make_uint4(kk[4], kk[5], kk[6], kk[7]);
    } else {
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        if (i0 + j < list.mine) list.keys[i0 + j] = kk[j];
      }
    }
  }
  __syncthreads();
}

// One 8-bit radix pass of the cluster's keys (RadixDigitStep: per-warp histograms, each CTA's
// sum summed over the cluster through distributed shared memory). Returns true once the
// selection is complete (pass 0 found at most k keys: all taken).
template <class List>
__device__ __forceinline__ bool RadixPass(Shared& sh, const cg::cluster_group& cluster, int cl,
                                          const TopkArgs& a, const List& list, int pass) {
  auto for_keys = [&](auto add) {
    for (int64_t base = 0; base < list.len; base += kTile) {
      uint32_t kk[kPerThread];
      list.Round(a, base, kk);
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) add(kk[j]);
    }
  };
  auto cluster_sum = [&](int bin, int32_t sum) {
    uint32_t* mine = sh.hist[pass & 1];
    if (threadIdx.x < kRadixBins) mine[bin] = uint32_t(sum);
    DSV41_STAMP(2 + 2 * pass);
    cluster.sync();  // every CTA's histogram is complete
    int32_t count = 0;
    if (threadIdx.x < kRadixBins) {
      // Eight peers' loads in flight at once (a loop of dependent remote loads pays each one's
      // latency in turn).
      for (int c0 = 0; c0 < cl; c0 += 8) {
        uint32_t part[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          part[c] = c0 + c < cl ? cluster.map_shared_rank(mine, c0 + c)[bin] : 0u;
        }
#pragma unroll
        for (int c = 0; c < 8; ++c) count += int32_t(part[c]);
      }
    }
    return count;
  };
  const bool all = RadixDigitStep<kThreads>(sh.radix, sh.warp_hist, pass, for_keys, cluster_sum,
                                            sh.warp_sums, &sh.scan_total);
  // No second cluster barrier: the next pass writes the other histogram buffer, and this one
  // is rewritten only after the next pass's barrier, which every peer reaches after reading it.
  DSV41_STAMP(3 + 2 * pass);
  return all;  // uniform across the cluster (same totals everywhere)
}

// After pass 0: keep, in position order, this CTA's keys in or above the chosen top-byte bucket,
// the only ones later passes, the counts and the emission need. A cached chunk is compacted in
// place (slots never pass the entries being read; positions go past its end). The list switches
// to the kept pairs when they fit (else it keeps reading the chunk from global memory).
template <class List>
__device__ __forceinline__ void CompactToBucket(Shared& sh, const TopkArgs& a, List& list) {
  const uint32_t first = sh.radix.prefix >> 24;
  int64_t kept = 0;
  for (int64_t base = 0; base < list.mine; base += kTile) {
    uint32_t kk[kPerThread];
    const int64_t i0 = base + int64_t(threadIdx.x) * kPerThread;
    list.Round(a, base, kk);
    int32_t n_keep = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) n_keep += kk[j] != kExcluded && (kk[j] >> 24) >= first;
    int64_t slot = kept + BlockExclusiveScan<kThreads>(n_keep, sh.warp_sums, &sh.scan_total);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (kk[j] != kExcluded && (kk[j] >> 24) >= first) {
        if (slot < kCompacted) {
          list.keys[slot] = kk[j], list.kept_pos[slot] = int32_t(list.r.lo + i0 + j);
        }
        ++slot;
      }
    }
    kept += sh.scan_total;  // uniform
  }
  __syncthreads();
  list.compacted = kept <= kCompacted;
  if (list.compacted) list.len = kept;
}

// This CTA's first output slot and tie rank (sh.out_base, sh.eq_before) and the row's total
// (sh.total), from every CTA's count of keys above the k-th and of ties at it.
template <class List, class IsGt, class IsEq>
__device__ __forceinline__ void ClusterOffsets(Shared& sh, const cg::cluster_group& cluster, int cl,
                                               int rank, const TopkArgs& a, const List& list,
                                               int32_t need_eq, IsGt is_gt, IsEq is_eq) {
  int32_t gt = 0, eq = 0;
  for (int64_t base = 0; base < list.len; base += kTile) {
    uint32_t kk[kPerThread];
    list.Round(a, base, kk);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) gt += is_gt(kk[j]), eq += is_eq(kk[j]);
  }
  BlockExclusiveScan<kThreads>(gt, sh.warp_sums, &sh.scan_total), gt = sh.scan_total;
  BlockExclusiveScan<kThreads>(eq, sh.warp_sums, &sh.scan_total), eq = sh.scan_total;
  if (threadIdx.x == 0) sh.counts[0] = gt, sh.counts[1] = eq;
  cluster.sync();
  if (threadIdx.x < 32) {  // lane c reads CTA c's counts: all remote loads in flight at once
    const int c = int(threadIdx.x);
    int32_t g = 0, e = 0;
    if (c < cl) {
      const int32_t* peer = cluster.map_shared_rank(sh.counts, c);
      g = peer[0], e = peer[1];
    }
    int32_t e_incl = e;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, e_incl, d);
      if (c >= d) e_incl += y;
    }
    const int32_t e_before = e_incl - e;
    const int32_t sel = g + min(max(need_eq - e_before, 0), e);  // ties go to earlier CTAs first
    int32_t s_incl = sel;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, s_incl, d);
      if (c >= d) s_incl += y;
    }
    if (c == rank) sh.out_base = s_incl - sel, sh.eq_before = e_before;
    if (c == 31) sh.total = s_incl;
  }
  cluster.sync();  // peers' counts read: they may exit or reuse shared memory
}

// Emission in list (= position) order, kPerThread consecutive entries per thread, a round at a
// time (EmitRoundInOrder: a round holds 4096 entries).
template <class List, class IsGt, class IsEq>
__device__ __forceinline__ void Emit(Shared& sh, const TopkArgs& a, int64_t row, int cl, int rank,
                                     const List& list, int32_t need_eq, IsGt is_gt, IsEq is_eq) {
  int32_t* out = a.out + row * int64_t(a.k);
  EmitState st = {sh.out_base, sh.eq_before};  // this CTA's first slot and tie rank
  for (int64_t t0 = 0; t0 < list.len; t0 += kTile) {
    const int64_t i0 = t0 + int64_t(threadIdx.x) * kPerThread;
    uint32_t kk[kPerThread];
    list.Round(a, t0, kk);
    EmitRoundInOrder<kThreads>(
        st, kk, need_eq, is_gt, is_eq,
        [&](int j, int32_t slot) {
          if (slot < a.k) out[slot] = list.Position(i0 + j);
        },
        sh.warp_sums, &sh.scan_total);
  }
  if (rank == cl - 1) {
    for (int32_t s = sh.total + threadIdx.x; s < a.k; s += kThreads) out[s] = -1;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2) ClusterTopkKernel(TopkArgs a, int64_t chunk) {
  // Two CTAs per SM: a 16-CTA cluster then fits in 8 SMs of a GPC (one per SM leaves clusters
  // waiting for a whole free GPC, so a row's CTAs start far apart).
  extern __shared__ uint32_t dyn[];  // [cached keys, or compacted keys | positions | member bitmap]
  __shared__ Shared sh;
  cg::cluster_group cluster = cg::this_cluster();
  DSV41_STAMP(0);
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cl;

  // ---- the row and this CTA's chunk (lengths clamped: nothing is read past the row)
  KeyList<T> list;
  list.r = topk::RowChunk<T>(a, row, chunk, rank);
  list.mine = list.len = list.r.hi - list.r.lo;
  list.cached = chunk <= kCachedKeys;
  list.compacted = false;
  list.keys = dyn;
  list.kept_pos = reinterpret_cast<int32_t*>(dyn + kCompacted);
  if (a.members != nullptr && a.mode == TopkMode::kPositions) {
    BuildMemberBits(a, row, list.r, dyn + kCachedKeys);
  }
  list.aligned = topk::Aligned(list.r);
  if (list.cached) CacheChunk(a, list);
  DSV41_STAMP(1);

  // ---- four radix passes for the k-th largest key
  if (threadIdx.x == 0) sh.radix = {0, 0, a.k, 0};  // read after the first pass's barrier
  for (int pass = 0; pass < 4; ++pass) {
    if (RadixPass(sh, cluster, cl, a, list, pass)) break;
    if (pass == 0 && (!list.cached || list.mine <= kCompacted)) CompactToBucket(sh, a, list);
  }
  const uint32_t prefix = sh.radix.prefix, mask = sh.radix.mask;
  const int32_t need_eq = sh.radix.k_rem;  // all taken: k, at least the valid keys
  auto is_gt = [&](uint32_t kk) { return kk != kExcluded && (kk & mask) > prefix; };
  auto is_eq = [&](uint32_t kk) { return kk != kExcluded && (kk & mask) == prefix; };

  // ---- every CTA's counts for the emission offsets, then the emission
  ClusterOffsets(sh, cluster, cl, rank, a, list, need_eq, is_gt, is_eq);
  DSV41_STAMP(10);
  Emit(sh, a, row, cl, rank, list, need_eq, is_gt, is_eq);
  DSV41_STAMP(11);
}

ClusterWaves g_waves;  // recorded by PrepareClusterTopk

}  // namespace

cudaError_t PrepareClusterTopk() {
  cudaError_t err =
      SetMaxDynamicSmem(kMaxTopkSmem, ClusterTopkKernel<float>, ClusterTopkKernel<topk::Bf16>);
  for (auto kernel : {ClusterTopkKernel<float>, ClusterTopkKernel<topk::Bf16>}) {
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
  }
  // Rows of unmasked chunks that keep their keys (the launches this limit decides).
  g_waves.Record(ClusterTopkKernel<float>, kThreads, size_t(kCachedKeys) * sizeof(uint32_t),
                 kMaxCluster);
  return err;
}

cudaError_t LaunchClusterTopk(const TopkArgs& args, cudaStream_t stream) {
  if (args.rows == 0 || args.k == 0) return cudaSuccess;
  const int64_t len_max = args.n;
  int cl = 1;
  while (cl < kMaxCluster && (len_max + cl - 1) / cl > kCachedKeys) cl *= 2;
  // Split further while the doubled clusters run in one wave and chunks keep 2048 keys.
  while (cl > 1 && g_waves.OneWave(args.rows, 2 * cl) &&
         (len_max + 2 * cl - 1) / (2 * cl) >= 2048 && cl < kMaxCluster) {
    cl *= 2;
  }
  const int64_t chunk = (len_max + cl - 1) / cl;
  const int64_t member_words = args.members ? (chunk / args.block_size + 2 + 31) / 32 + 1 : 0;
  const size_t smem = size_t(kCachedKeys + member_words) * sizeof(uint32_t);
  if (smem > kMaxTopkSmem) return cudaErrorInvalidValue;  // rows beyond ~50M positions
  return args.bf16 ? topk::LaunchRowClusters(ClusterTopkKernel<topk::Bf16>, args, chunk, cl,
                                             kThreads, smem, stream)
                   : topk::LaunchRowClusters(ClusterTopkKernel<float>, args, chunk, cl, kThreads,
                                             smem, stream);
}

}  // namespace dsv41
