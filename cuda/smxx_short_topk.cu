// Exact top-k for short rows (up to 8 x 16384 scores): a row is split over a cluster of 1-8 CTAs
// of 1024 threads, and each thread loads 16 scores of its CTA's chunk once, as order-preserving
// keys held in registers. Nothing is buffered and the row is never read again:
//   - three digit passes (11, 11 and 10 bits) of shared-memory histograms find the k-th key.
//     Every CTA sums the cluster's histograms through distributed shared memory, so all of them
//     take the same branches; the search stops after a pass whose bin holds exactly the keys
//     still needed;
//   - the output comes in position order from one block scan of per-tile counts of keys above
//     the k-th and equal to it (the first ties by position), offset by the counts of the
//     cluster's lower-ranked CTAs: no buffer, no sort.
// Latency, not bytes, bounds short rows: one dependent load, three histogram passes and one
// scan, where the filter and cluster selects pay four-pass cuts or cluster-wide passes over
// global memory.
#include <cooperative_groups.h>

#include "smxx_bitmap.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_short_topk.cuh"
#include "smxx_topk_keys.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = int(kShortChunk / kThreads);  // keys per thread
constexpr int kSegment = 32 * kPer;                 // a warp's consecutive scores
constexpr int kBins = 2048;                         // the widest digit: 11 bits
// A chunk's candidate bitmap: at block size 1 one bit per score, plus the straddling ends.
constexpr int kMaskWords = int(kShortChunk / 32) + 2;
static_assert(kShortChunk % kThreads == 0 && kPer % 8 == 0, "whole 16-byte vectors per thread");
static_assert(kWarps == 32, "one warp scans the warp sums");
using topk::kExcluded;

struct Shared {
  uint32_t hist[3][kBins];  // one per pass: peers may read a pass's while this CTA fills the next
  int32_t warp_sums[kWarps];
  int32_t bin, above, in_bin;  // the pass's digit, the keys above its bin, the keys in it
  int32_t total;               // the keys that took part in the pass
  int32_t counts;              // this CTA's keys above the k-th | equal to it << 16 (peers read)
  uint32_t member_bits[kMaskWords];
};

__device__ __forceinline__ uint32_t WarpInclusiveScan(uint32_t x, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

__device__ __forceinline__ void ClusterSync(const cg::cluster_group& cluster, int cl) {
  if (cl > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
}

struct Digit {
  int32_t bin, above, in_bin, total;
};

// One digit pass over the keys whose bits above kShift + kWidth equal `prefix`: the bin (digit)
// holding the k_rem-th largest of them, the keys above that bin and in it, and how many keys
// took part (over the whole cluster). All threads of all the cluster's CTAs call it.
template <int kShift, int kWidth>
__device__ Digit DigitPass(Shared& sh, const uint32_t (&key)[kPer], const cg::cluster_group& cluster,
                           int cl, uint32_t prefix, int32_t k_rem) {
  constexpr int kDigits = 1 << kWidth, kDigitsPer = kDigits / kThreads;
  constexpr int kPass = kShift == 21 ? 0 : kShift == 10 ? 1 : 2;
  static_assert(kDigits <= kBins && kDigitsPer >= 1);
  uint32_t* h = sh.hist[kPass];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    bool in = key[i] != kExcluded;
    if constexpr (kShift + kWidth < 32) in = in && (key[i] >> (kShift + kWidth)) == prefix;
    if (in) atomicAdd(&h[(key[i] >> kShift) & (kDigits - 1)], 1u);
  }
  ClusterSync(cluster, cl);
  // Thread t holds digits kDigits - 1 - t * kDigitsPer - j (descending), so the keys above a
  // thread's digits are the counts of the threads before it. Every warp sums its digits; warp 0
  // scans the warp sums, finds the warp whose digits hold the k_rem-th key, and takes that
  // warp's digits again to find the digit: two barriers, and one warp's scans.
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const auto digit = [](int t, int j) { return kDigits - 1 - (t * kDigitsPer + j); };
  const auto count = [&](int d) {
    if (cl == 1) return int32_t(h[d]);
    int32_t v = 0;
#pragma unroll
    for (int r = 0; r < kShortMaxCluster; ++r) {  // unrolled: the peers' loads fly together
      if (r < cl) v += int32_t(cluster.map_shared_rank(h, r)[d]);
    }
    return v;
  };
  int32_t mine = 0;
#pragma unroll
  for (int j = 0; j < kDigitsPer; ++j) mine += count(digit(int(threadIdx.x), j));
  const int32_t warp_sum = int32_t(WarpInclusiveScan(uint32_t(mine), lane));
  if (lane == 31) sh.warp_sums[warp] = warp_sum;
  __syncthreads();
  if (warp == 0) {
    const int32_t w = sh.warp_sums[lane];  // kWarps == 32
    const int32_t wi = int32_t(WarpInclusiveScan(uint32_t(w), lane));
    const unsigned hit = __ballot_sync(0xffffffffu, wi >= k_rem);
    if (lane == 31) sh.total = wi;
    if (hit != 0) {  // else fewer than k_rem keys: no digit is asked for
      const int holder = __ffs(int(hit)) - 1;
      const int t = holder * 32 + lane;
      int32_t c[kDigitsPer], m = 0;
#pragma unroll
      for (int j = 0; j < kDigitsPer; ++j) c[j] = count(digit(t, j)), m += c[j];
      int32_t above = __shfl_sync(0xffffffffu, wi - w, holder) +
                      int32_t(WarpInclusiveScan(uint32_t(m), lane)) - m;
#pragma unroll
      for (int j = 0; j < kDigitsPer; ++j) {
        if (above < k_rem && k_rem <= above + c[j]) {
          sh.bin = digit(t, j), sh.above = above, sh.in_bin = c[j];
        }
        above += c[j];
      }
    }
  }
  __syncthreads();
  return Digit{sh.bin, sh.above, sh.in_bin, sh.total};
}

// The largest key below the bin that starts at `lo` (keys 0 are never taken, so 0 for lo = 0).
__device__ __forceinline__ uint32_t Below(uint32_t lo) { return lo == 0 ? 0 : lo - 1; }

template <class T>
__global__ void __launch_bounds__(kThreads, 1) ShortTopkKernel(TopkArgs a, int64_t chunk) {
  extern __shared__ uint32_t dyn[];  // dynamic: the CPU stand-in starts it as garbage
  Shared& sh = *reinterpret_cast<Shared*>(dyn);
  const cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cl;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  DSV41_STAMP(0);

  // ---- the chunk's keys: tile j of lane l of warp w holds chunk elements
  //      w * kSegment + (32 * j + l) * kVec + [0, kVec), so a warp's load reads 512 contiguous
  //      bytes. Without starts the row's address needs no load: the scores of the chunk's
  //      columns are in flight before the length arrives, and masked by it after.
  constexpr int kVec = 16 / int(sizeof(T)), kTiles = kPer / kVec;
  const int64_t seg = int64_t(warp) * kSegment + lane * kVec;
  topk::Row<T> cols;  // the chunk's columns: every score of the row there may be read
  {
    const int64_t start = a.starts ? min(max(int64_t(a.starts[row]), int64_t(0)), a.n) : 0;
    cols.scores = static_cast<const T*>(a.scores) + row * a.n + start;
    cols.lo = min(int64_t(rank) * chunk, a.n - start);
    cols.hi = min(cols.lo + chunk, a.n - start);
  }
  float v[kTiles][kVec];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    topk::LoadScores<kVec>(cols, cols.hi - cols.lo, seg + 32 * kVec * j, topk::Aligned(cols), v[j]);
  }
  // The selectable part: r.lo == cols.lo unless the chunk lies past the row's length (then
  // mine == 0 and nothing of it is selected).
  topk::Row<T> r = topk::RowChunk<T>(a, row, chunk, rank);
  const int64_t mine = r.hi - r.lo;
  for (int i = threadIdx.x; i < 3 * kBins; i += kThreads) (&sh.hist[0][0])[i] = 0;
  if (a.members != nullptr) {  // the candidate blocks this chunk overlaps (it synchronises)
    const int64_t b0 = r.lo / a.block_size, b1 = (r.hi + a.block_size - 1) / a.block_size;
    MarkIds<kThreads>(sh.member_bits, b0, b1, a.members + row * a.num_members, a.num_members);
    r.member_bits = sh.member_bits, r.member_base = b0;
  } else {
    __syncthreads();
  }
  uint32_t key[kPer];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    uint32_t kk[kVec];
    topk::ScoresToKeys<kVec>(a, r, mine, seg + 32 * kVec * j, v[j], kk);
#pragma unroll
    for (int e = 0; e < kVec; ++e) key[kVec * j + e] = kk[e];
  }
  DSV41_STAMP(1);

  // ---- the k-th key: keys above `thresh` are taken, and the first `need` keys equal to it
  int32_t k_rem = a.k, need = 0;
  uint32_t thresh = 0;
  const Digit d0 = DigitPass<21, 11>(sh, key, cluster, cl, 0, k_rem);
  const int32_t total = d0.total;  // keys that may be selected
  DSV41_STAMP(2);
  if (total > a.k) {  // uniform over the cluster: every CTA summed the same histograms
    uint32_t prefix = uint32_t(d0.bin);
    k_rem -= d0.above;
    if (d0.in_bin == k_rem) {
      thresh = Below(prefix << 21);
    } else {
      const Digit d1 = DigitPass<10, 11>(sh, key, cluster, cl, prefix, k_rem);
      DSV41_STAMP(3);
      prefix = (prefix << 11) | uint32_t(d1.bin);
      k_rem -= d1.above;
      if (d1.in_bin == k_rem) {
        thresh = Below(prefix << 10);
      } else {
        const Digit d2 = DigitPass<0, 10>(sh, key, cluster, cl, prefix, k_rem);
        DSV41_STAMP(4);
        thresh = (prefix << 10) | uint32_t(d2.bin);
        need = k_rem - d2.above;
      }
    }
  }

  // ---- output slots in position order: per tile, the keys above / equal, scanned over the
  //      warp's lanes (packed: float tiles sum to <= 128 per lane scan, 8-bit fields, two tiles a
  //      word; bf16 tiles to <= 256, 16-bit fields), then over warps (warp 0) and CTAs
  constexpr int kField = 32 * kVec < 256 ? 8 : 16, kPerWord = 16 / kField;
  constexpr int kWords = kTiles / kPerWord;
  constexpr uint32_t kFieldMask = (1u << kField) - 1;
  static_assert(kTiles % kPerWord == 0);
  uint32_t before[kWords], tile[kWords];
  int32_t warp_above = 0, warp_equal = 0;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    uint32_t c = 0;
#pragma unroll
    for (int q = 0; q < kPerWord; ++q) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const uint32_t kk = key[kVec * (w * kPerWord + q) + e];
        const int field = kk > thresh ? 2 * q : (need > 0 && kk == thresh ? 2 * q + 1 : -1);
        if (field >= 0) c += 1u << (kField * field);
      }
    }
    const uint32_t x = WarpInclusiveScan(c, lane);
    before[w] = x - c;
    tile[w] = __shfl_sync(0xffffffffu, x, 31);
#pragma unroll
    for (int q = 0; q < kPerWord; ++q) {
      warp_above += int32_t((tile[w] >> (kField * 2 * q)) & kFieldMask);
      warp_equal += int32_t((tile[w] >> (kField * (2 * q + 1))) & kFieldMask);
    }
  }
  // A CTA's counts stay at most 2^14 each: one int holds above | equal << 16.
  if (lane == 31) sh.warp_sums[warp] = warp_above | (warp_equal << 16);
  __syncthreads();
  if (warp == 0) {  // the warps' exclusive prefixes, in place
    const int32_t w = sh.warp_sums[lane];
    const int32_t wi = int32_t(WarpInclusiveScan(uint32_t(w), lane));
    sh.warp_sums[lane] = wi - w;
    if (lane == 31) sh.counts = wi;
  }
  ClusterSync(cluster, cl);  // the prefixes, and this CTA's counts for its peers
  int32_t above = sh.warp_sums[warp] & 0xffff, equal = sh.warp_sums[warp] >> 16;
  for (int c = 0; c < rank; ++c) {
    const int32_t x = *cluster.map_shared_rank(&sh.counts, c);
    above += x & 0xffff, equal += x >> 16;
  }
  int32_t* out = a.out + row * int64_t(a.k);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int w = j / kPerWord, q = j % kPerWord;
    int32_t g = above + int32_t((before[w] >> (kField * 2 * q)) & kFieldMask);
    int32_t e = equal + int32_t((before[w] >> (kField * (2 * q + 1))) & kFieldMask);
    const int64_t p0 = r.lo + seg + 32 * kVec * j;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const uint32_t kk = key[kVec * j + i];
      if (kk > thresh) {
        out[g + min(e, need)] = int32_t(p0 + i), ++g;
      } else if (need > 0 && kk == thresh) {
        if (e < need) out[g + e] = int32_t(p0 + i);
        ++e;
      }
    }
    above += int32_t((tile[w] >> (kField * 2 * q)) & kFieldMask);
    equal += int32_t((tile[w] >> (kField * (2 * q + 1))) & kFieldMask);
  }
  if (rank == 0) {
    for (int32_t i = min(total, a.k) + int32_t(threadIdx.x); i < a.k; i += kThreads) out[i] = -1;
  }
  DSV41_STAMP(5);
  if (cl > 1) cluster.sync();  // the peers have read this CTA's counts: it may exit
}

template <class T>
cudaError_t Launch(const TopkArgs& args, cudaStream_t stream) {
  // Fewest CTAs that hold the row, equal chunks of whole warp segments (16-byte aligned).
  const int64_t cl = max((args.n + kShortChunk - 1) / kShortChunk, int64_t(1));
  const int64_t chunk = ((args.n + cl - 1) / cl + kSegment - 1) / kSegment * kSegment;
  return topk::LaunchRowClusters(ShortTopkKernel<T>, args, chunk, int(cl), kThreads,
                                 sizeof(Shared), stream);
}

}  // namespace

cudaError_t PrepareShortTopk() {
  return SetMaxDynamicSmem(sizeof(Shared), ShortTopkKernel<float>, ShortTopkKernel<topk::Bf16>);
}

int32_t ShortTopkMaxActiveClusters(int32_t cluster) {
  if (cluster < 1 || cluster > kShortMaxCluster) return 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(cluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(Shared);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  int count = 0;
  if (cudaOccupancyMaxActiveClusters(&count, ShortTopkKernel<float>, &config) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

cudaError_t LaunchShortTopk(const TopkArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  if (args.k <= 0 || args.n > kShortMaxCluster * kShortChunk) return cudaErrorInvalidValue;
  if (args.members != nullptr && args.mode != TopkMode::kPositions) return cudaErrorInvalidValue;
  return args.bf16 ? Launch<topk::Bf16>(args, stream) : Launch<float>(args, stream);
}

}  // namespace dsv41
