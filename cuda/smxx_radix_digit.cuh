// One 8-bit radix digit step towards the k-th largest key, shared by the filter-first and the
// cluster selects: count the keys under the known prefix into histogram copies, combine the
// copies (the CTA's sum, or the cluster's), find the digit holding the k_rem-th largest and
// narrow the state to it. The selects keep where the keys come from, how many copies, the
// combine and when they stop.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_block_scan.cuh"
#include "smxx_topk_keys.cuh"

namespace dsv41 {

constexpr int kRadixBins = 256;

// In shared memory: the k-th key's known top bits (`prefix` under `mask`), how many keys equal
// to it under the mask are still needed (`k_rem`) and how many there are (`in_bin`); `all` once
// the first step counted at most k keys: every key is taken (mask 0 makes each one equal, and
// k_rem = k covers them).
struct RadixState {
  uint32_t prefix, mask;
  int32_t k_rem, all, in_bin;
};

// Step `pass` (key bits 31 - 8 * pass down to 24 - 8 * pass) over the keys `for_keys(add)`
// hands each thread (kExcluded skipped): warp w adds to copy w % kCopies of `hist`, then
// `combine(bin, sum)` returns the count of bin 255 - t for thread t < 256 (`sum`: its copies'
// sum; 0 above). Every thread calls it; it reads `st` after its first barrier and writes it
// before its last. Returns st.all (uniform).
template <int kThreads, int kCopies, class ForKeys, class Combine>
__device__ __forceinline__ bool RadixDigitStep(RadixState& st,
                                               uint32_t (&hist)[kCopies][kRadixBins], int pass,
                                               ForKeys for_keys, Combine combine,
                                               int32_t* warp_sums, int32_t* total) {
  static_assert(kThreads >= kRadixBins, "one bin a thread");
  const int shift = 24 - 8 * pass;
  for (int i = threadIdx.x; i < kCopies * kRadixBins; i += kThreads) (&hist[0][0])[i] = 0;
  __syncthreads();
  const uint32_t prefix = st.prefix, mask = st.mask;
  const int32_t k_rem = st.k_rem;
  uint32_t* h = hist[(threadIdx.x / 32) % kCopies];  // contention stays inside a few warps
  for_keys([&](uint32_t key) {
    if (key != topk::kExcluded && (key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xff], 1u);
  });
  __syncthreads();
  const int bin = kRadixBins - 1 - int(threadIdx.x);  // descending, as BlockFindDigit scans
  uint32_t sum = 0;
  if (threadIdx.x < kRadixBins) {
#pragma unroll
    for (int c = 0; c < kCopies; ++c) sum += hist[c][bin];
  }
  const int32_t count[1] = {combine(bin, int32_t(sum))};
  const DigitHit d = BlockFindDigit<kThreads>(count, bin, k_rem, warp_sums, total);
  if (pass == 0 && *total <= k_rem) {
    if (threadIdx.x == 0) st.all = 1;
  } else if (d.hit) {
    st.prefix = prefix | (uint32_t(bin) << shift);
    st.mask = mask | (0xffu << shift);
    st.k_rem = k_rem - d.above;  // still needed from this bin
    st.in_bin = d.count;
  }
  __syncthreads();
  return st.all;
}

}  // namespace dsv41
