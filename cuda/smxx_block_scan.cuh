// Warp- and block-wide prefix sums over one int32 per thread (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// The sum of v over the warp's lanes up to this one (every lane of the warp calls it); T
// unsigned for sums that may wrap (packed fields).
template <class T>
__device__ __forceinline__ T WarpInclusiveScan(T v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += y;
  }
  return v;
}

// `warp_sums` holds kThreads / 32 ints of shared memory; `total` receives the block's sum.
// Every thread of the block must call it (it synchronises twice).
template <int kThreads>
__device__ __forceinline__ int32_t BlockExclusiveScan(int32_t value, int32_t* warp_sums,
                                                      int32_t* total) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kWarps <= 32, "one warp scans the warp sums");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t inclusive = WarpInclusiveScan(value);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int32_t s = WarpInclusiveScan(lane < kWarps ? warp_sums[lane] : 0);
    if (lane < kWarps) warp_sums[lane] = s;
    if (lane == kWarps - 1) *total = s;
  }
  __syncthreads();
  const int32_t result = inclusive - value + (warp > 0 ? warp_sums[warp - 1] : 0);
  __syncthreads();  // warp_sums may be reused right after
  return result;
}

// Where a histogram's k_rem-th largest key falls, by one scan over the CTA: thread t holds the
// counts c[j] of digits top - j (j < kPer), the CTA's digits in descending order thread after
// thread (top = kDigits - 1 - t * kPer), so the scan of the threads' sums counts the keys in the
// digits above each thread's. Every thread calls it; `total` receives the keys counted. Returns
// on the one thread whose digit holds it (k_rem in [1, total]): hit, the digit, the keys above
// it and in it.
struct DigitHit {
  bool hit;
  int32_t digit, above, count;
};

template <int kThreads, int kPer>
__device__ __forceinline__ DigitHit BlockFindDigit(const int32_t (&c)[kPer], int32_t top,
                                                   int32_t k_rem, int32_t* warp_sums,
                                                   int32_t* total) {
  int32_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) mine += c[j];
  int32_t above = BlockExclusiveScan<kThreads>(mine, warp_sums, total);
  DigitHit found = {false, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (above < k_rem && k_rem <= above + c[j]) found = {true, top - j, above, c[j]};
    above += c[j];
  }
  return found;
}

// One round of an in-order emission over the CTA: thread t holds kPer consecutive entries `kk`
// (rounds and threads in entry order); the entries above the k-th key (`is_gt`) and the first
// `need_eq` equal to it (`is_eq`), in entry order, get consecutive slots from `st.emitted`,
// and `put(j, slot)` writes entry j of this thread to its slot. One scan a round: both counts
// packed in 16 bits (a round's stay below 2^16). Every thread calls it; entries are read
// before its barriers and `put` writes after them. `st` carries the slots taken and the ties
// seen to the next round.
struct EmitState {
  int32_t emitted, eq_seen;
};

template <int kThreads, int kPer, class IsGt, class IsEq, class Put>
__device__ __forceinline__ void EmitRoundInOrder(EmitState& st, const uint32_t (&kk)[kPer],
                                                 int32_t need_eq, IsGt is_gt, IsEq is_eq, Put put,
                                                 int32_t* warp_sums, int32_t* total) {
  int32_t gt = 0, eq = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) gt += is_gt(kk[j]), eq += is_eq(kk[j]);
  const int32_t before = BlockExclusiveScan<kThreads>(gt | (eq << 16), warp_sums, total);
  const int32_t round = *total;
  const int32_t ties_left = max(need_eq - st.eq_seen, 0);
  int32_t eq_rank = st.eq_seen + (before >> 16);
  int32_t slot = st.emitted + (before & 0xffff) + min(ties_left, before >> 16);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const bool take = is_gt(kk[j]) || (is_eq(kk[j]) && eq_rank < need_eq);
    eq_rank += is_eq(kk[j]);
    if (take) put(j, slot);
    slot += take;
  }
  st.emitted += (round & 0xffff) + min(ties_left, round >> 16);
  st.eq_seen += round >> 16;
}

}  // namespace dsv41
