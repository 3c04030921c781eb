// Block-wide exclusive prefix sum over one int32 per thread (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// `warp_sums` holds kThreads / 32 ints of shared memory; `total` receives the block's sum.
// Every thread of the block must call it (it synchronises twice).
template <int kThreads>
__device__ __forceinline__ int32_t BlockExclusiveScan(int32_t value, int32_t* warp_sums,
                                                      int32_t* total) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kWarps <= 32, "one warp scans the warp sums");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t y = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += y;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int32_t s = lane < kWarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= d) s += y;
    }
    if (lane < kWarps) warp_sums[lane] = s;
    if (lane == kWarps - 1) *total = s;
  }
  __syncthreads();
  const int32_t result = inclusive - value + (warp > 0 ? warp_sums[warp - 1] : 0);
  __syncthreads();  // warp_sums may be reused right after
  return result;
}

}  // namespace dsv41
