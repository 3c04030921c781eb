// Set bits of a shared-memory bitmap, in ascending order (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_block_scan.cuh"

namespace dsv41 {

// Sets bit b - lo of `bits` for every id b in [lo, hi) among ids[0, n) (any order; repeats and
// ids outside the range are ignored), after clearing those hi - lo bits. Every thread of the
// block calls it (it synchronises twice).
template <int kThreads>
__device__ __forceinline__ void MarkIds(uint32_t* bits, int64_t lo, int64_t hi, const int32_t* ids,
                                        int64_t n) {
  const int64_t words = (hi - lo + 31) / 32;
  for (int64_t w = threadIdx.x; w < words; w += kThreads) bits[w] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t b = ids[i];
    if (b >= lo && b < hi) atomicOr(&bits[(b - lo) >> 5], 1u << ((b - lo) & 31));
  }
  __syncthreads();
}

// Calls emit(b, i, n) for every set bit b of bitmap[0, words), i being b's rank among the n set
// bits, so ascending b lands at ascending i. Each thread owns a contiguous run of words: one block
// scan of their popcounts gives every thread its first rank, and no comparison is needed. Returns
// the number of set bits. Every thread of the block calls it (it synchronises).
template <int kThreads, class Emit>
__device__ __forceinline__ int32_t ForEachSetBitInOrder(const uint32_t* bitmap, int64_t words,
                                                        int32_t* warp_sums, int32_t* total,
                                                        Emit emit) {
  const int64_t per = (words + kThreads - 1) / kThreads;
  const int64_t w0 = min(int64_t(threadIdx.x) * per, words), w1 = min(w0 + per, words);
  int32_t mine = 0;
  for (int64_t w = w0; w < w1; ++w) mine += __popc(bitmap[w]);
  int32_t rank = BlockExclusiveScan<kThreads>(mine, warp_sums, total);
  const int32_t n = *total;
  for (int64_t w = w0; w < w1; ++w) {
    for (uint32_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
      emit(int32_t(w * 32 + __ffs(bits) - 1), rank++, n);
    }
  }
  return n;
}

}  // namespace dsv41
