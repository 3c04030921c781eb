// Exact top-k, filter first. A row is split over a cluster of 1-8 CTAs (one per SM). Each CTA
// streams its chunk once and appends, in position order, the keys at or above an entry bar to a
// shared-memory buffer of (key, position) pairs:
//   - the bar starts at an estimate of the chunk's k-th key from a strided sample of 1024 keys
//     (two 8-bit radix steps on the sample), set so that about twice k keys pass;
//   - when a round would overflow the buffer, the buffer is cut to its own exact top k and the
//     bar rises above the k-th key (a later position that only ties it can never get in);
//   - if fewer than k keys passed a sampled bar, the chunk is streamed again with no bar (exact
//     whatever the sample said).
// The buffer then holds the chunk's exact top k: the union over the chunks holds the row's. The
// cluster's first CTA gathers the peers' buffers through distributed shared memory (in chunk
// order, so still in position order), cuts to the top k and writes the positions, ascending.
// Every cut is a 4-pass radix select over shared memory with ties taken in buffer (= position)
// order, so the result is the contract's (score desc, position asc) set, deterministic.
// The global scores are read once (twice in the sample-fallback case), with the next round's loads
// in flight while a round is appended: the few dependent phases of the cluster radix select
// (four cluster-wide histogram passes) become block-local ones over a few thousand keys.
#include <cooperative_groups.h>

#include "smxx_block_scan.cuh"
#include "smxx_filter_topk.cuh"
#include "smxx_topk_keys.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 8;                  // consecutive elements per thread per round
constexpr int kRound = kThreads * kPer;  // 8192 elements per round
constexpr int kBins = 256;
constexpr int kHists = 8;                // histogram copies (warp w adds to copy w % 8)
constexpr int kSample = kThreads;        // one sampled key per thread
constexpr int kMaxCluster = 8;           // portable cluster size: one CTA per SM fits a GPC
constexpr int64_t kCap = kFilterCapacity;
static_assert(kFilterMaxK + kRound <= kCap, "a cut buffer plus one round must fit");
using topk::kExcluded;

struct Shared {
  uint32_t hist[kHists][kBins];
  int32_t warp_sums[kWarps];
  int32_t scan_total;
  uint32_t prefix, mask;  // the selected key's known top bits
  int32_t k_rem;          // keys equal to it (under the mask) still to take
  int32_t all;            // at most k keys: all taken
  int32_t count;          // pairs in the buffer (read by the cluster's first CTA)
};

// The k-th largest of the keys that `for_keys` hands each thread (kExcluded skipped), to its top
// 8 * `passes` bits: sh.prefix / sh.mask, and sh.k_rem of the keys equal to it under the mask
// are needed; sh.all = 1 when there are at most k keys. All threads call it.
template <class ForKeys>
__device__ void RadixSelect(Shared& sh, int32_t k, int passes, ForKeys for_keys) {
  __syncthreads();  // every thread has read the previous selection's results
  if (threadIdx.x == 0) sh.prefix = 0, sh.mask = 0, sh.k_rem = k, sh.all = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < kHists * kBins; i += kThreads) (&sh.hist[0][0])[i] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix, mask = sh.mask;
    const int32_t k_rem = sh.k_rem;
    uint32_t* h = sh.hist[(threadIdx.x / 32) % kHists];
    for_keys([&](uint32_t key) {
      if (key != kExcluded && (key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xff], 1u);
    });
    __syncthreads();
    int32_t count = 0;
    const int bin = kBins - 1 - int(threadIdx.x);  // thread t holds bin 255 - t: scan = above
    if (threadIdx.x < kBins) {
#pragma unroll
      for (int c = 0; c < kHists; ++c) count += int32_t(sh.hist[c][bin]);
    }
    const int32_t above = BlockExclusiveScan<kThreads>(count, sh.warp_sums, &sh.scan_total);
    if (pass == 0 && sh.scan_total <= k_rem) {
      if (threadIdx.x == 0) sh.all = 1;
    } else if (threadIdx.x < kBins && above < k_rem && above + count >= k_rem) {
      sh.prefix = prefix | (uint32_t(bin) << shift);
      sh.mask = mask | (0xffu << shift);
      sh.k_rem = k_rem - above;
    }
    __syncthreads();
    if (sh.all) break;  // uniform
  }
}

// Cuts the buffer's n > k pairs, in place and in order, to its top k by (key desc, buffer index
// asc). Returns the least key a later pair needs to get in: one above the k-th key.
__device__ uint64_t CutToTopK(Shared& sh, uint32_t* keys, int32_t* pos, int32_t n, int32_t k) {
  RadixSelect(sh, k, 4, [&](auto add) {
    for (int32_t i = threadIdx.x; i < n; i += kThreads) add(keys[i]);
  });
  const uint32_t kth = sh.prefix;    // n > k valid keys: a full key >= 1
  const int32_t need_eq = sh.k_rem;  // ties at kth to keep, the first ones in buffer order
  int32_t kept = 0, eq_seen = 0;
  for (int32_t base = 0; base < n; base += kRound) {
    const int32_t i0 = base + int32_t(threadIdx.x) * kPer;
    uint32_t kk[kPer];
    int32_t pp[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      kk[j] = i0 + j < n ? keys[i0 + j] : kExcluded;
      pp[j] = i0 + j < n ? pos[i0 + j] : 0;
    }
    int32_t gt = 0, eq = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) gt += kk[j] > kth, eq += kk[j] == kth;
    // One scan: counts below 2^16 per round (8192 entries). Every read of this round happens
    // before its barriers and every write after; writes land below the round's end.
    const int32_t before =
        BlockExclusiveScan<kThreads>(gt | (eq << 16), sh.warp_sums, &sh.scan_total);
    const int32_t round = sh.scan_total;
    const int32_t ties_left = max(need_eq - eq_seen, 0);
    int32_t eq_rank = eq_seen + (before >> 16);
    int32_t slot = kept + (before & 0xffff) + min(ties_left, before >> 16);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const bool take = kk[j] > kth || (kk[j] == kth && eq_rank < need_eq);
      eq_rank += kk[j] == kth;
      if (take) keys[slot] = kk[j], pos[slot] = pp[j], ++slot;
    }
    kept += (round & 0xffff) + min(ties_left, round >> 16);
    eq_seen += round >> 16;
  }
  __syncthreads();
  return uint64_t(kth) + 1;
}

template <class T>  // the score type: float or topk::Bf16
__global__ void __launch_bounds__(kThreads, 1) FilterTopkKernel(TopkArgs a, int64_t chunk) {
  extern __shared__ uint32_t dyn[];  // keys [kCap] | positions [kCap]
  __shared__ Shared sh;
  uint32_t* keys = dyn;
  int32_t* pos = reinterpret_cast<int32_t*>(dyn + kCap);
  cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cl;
  const topk::Row<T> r = topk::RowChunk<T>(a, row, chunk, rank);
  const int64_t mine = r.hi - r.lo;
  const bool aligned = topk::Aligned(r);
  const int32_t k = a.k;

  // ---- the entry bar: keys >= bar enter the buffer (kExcluded = 0 never does)
  uint64_t sampled_bar = 1;
  if (mine > kCap) {
    const int64_t rank_wanted = (2 * int64_t(k) * kSample + mine - 1) / mine + 8;
    if (rank_wanted <= kSample / 2) {
      const int64_t p = int64_t(threadIdx.x) * mine / kSample;  // < mine
      const uint32_t key = topk::KeyOf(a, r, r.lo + p, topk::ToFloat(r.scores[r.lo + p]));
      RadixSelect(sh, int32_t(rank_wanted), 2, [&](auto add) { add(key); });
      if (!sh.all) sampled_bar = max(uint64_t(sh.prefix), uint64_t(1));
    }
  }

  // ---- stream the chunk once (again without a bar if the sampled one kept fewer than k)
  int32_t count = 0;
  for (uint64_t bar = sampled_bar;; bar = 1) {
    count = 0;
    float v[kPer];
    topk::LoadScores<kPer>(r, mine, int64_t(threadIdx.x) * kPer, aligned, v);
    for (int64_t base = 0; base < mine; base += kRound) {
      const int64_t i0 = base + int64_t(threadIdx.x) * kPer;
      uint32_t kk[kPer];
      topk::ScoresToKeys<kPer>(a, r, mine, i0, v, kk);
      if (base + kRound < mine) topk::LoadScores<kPer>(r, mine, i0 + kRound, aligned, v);
      int32_t n = 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) n += kk[j] >= bar;
      int32_t slot = BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
      int32_t round = sh.scan_total;
      if (count + round > kCap) {  // uniform; count > kCap - kRound >= k
        bar = CutToTopK(sh, keys, pos, count, k);
        count = k;
        n = 0;
#pragma unroll
        for (int j = 0; j < kPer; ++j) n += kk[j] >= bar;
        slot = BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
        round = sh.scan_total;
      }
      slot += count;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (kk[j] >= bar) keys[slot] = kk[j], pos[slot] = int32_t(r.lo + i0 + j), ++slot;
      }
      count += round;
    }
    __syncthreads();
    if (count >= k || bar <= 1) break;  // uniform
  }

  // ---- this chunk's top k, then the row's: the first CTA gathers the chunks' (chunk order)
  if (count > k) {
    CutToTopK(sh, keys, pos, count, k);
    count = k;
  }
  if (cl > 1) {
    if (threadIdx.x == 0) sh.count = count;
    cluster.sync();  // every chunk's buffer is final
    if (rank == 0) {
      for (int c = 1; c < cl; ++c) {  // at most cl * k <= kCap pairs (the launcher's rule)
        const int32_t n_c = *cluster.map_shared_rank(&sh.count, c);
        const uint32_t* peer_keys = cluster.map_shared_rank(keys, c);
        const int32_t* peer_pos = cluster.map_shared_rank(pos, c);
        for (int32_t i = threadIdx.x; i < n_c; i += kThreads) {
          keys[count + i] = peer_keys[i], pos[count + i] = peer_pos[i];
        }
        count += n_c;
      }
    }
    cluster.sync();  // the peers' buffers are read: they may exit
    if (rank != 0) return;
    if (count > k) {
      CutToTopK(sh, keys, pos, count, k);
      count = k;
    }
  }
  int32_t* out = a.out + row * int64_t(k);
  for (int32_t i = threadIdx.x; i < k; i += kThreads) out[i] = i < count ? pos[i] : -1;
}

constexpr size_t kSmem = size_t(2 * kCap) * sizeof(uint32_t);

}  // namespace

cudaError_t PrepareFilterTopk() {
  for (auto kernel : {FilterTopkKernel<float>, FilterTopkKernel<topk::Bf16>}) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t LaunchFilterTopk(const TopkArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  if (args.members != nullptr || args.k <= 0 || args.k > kFilterMaxK) return cudaErrorInvalidValue;
  // Split a row while the GPU has idle SMs, each chunk keeps at least one whole round and the
  // first CTA can hold every chunk's top k.
  int cl = 1;
  while (cl < kMaxCluster && args.rows * cl < 128 && args.n / (2 * cl) >= kRound &&
         2 * cl * int64_t(args.k) <= kCap) {
    cl *= 2;
  }
  const int64_t chunk = (args.n + cl - 1) / cl;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(args.rows * cl));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cl);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return args.bf16 ? cudaLaunchKernelEx(&config, FilterTopkKernel<topk::Bf16>, args, chunk)
                   : cudaLaunchKernelEx(&config, FilterTopkKernel<float>, args, chunk);
}

}  // namespace dsv41
