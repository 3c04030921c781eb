// What the top-k kernels select by: one row of a TopkArgs call, its order-preserving 32-bit keys
// (0 = never selected) and the loads that produce them. Shared by the cluster radix select and
// the filter-first select, so both implement the contract through the same code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_launch.cuh"
#include "smxx_topk_args.cuh"

namespace dsv41 {
namespace topk {

constexpr uint32_t kPinned = 0xffffffffu, kLowest = 1u, kExcluded = 0u;

// What a load leaves where there is no element: a NaN, which no select ever takes.
__device__ __forceinline__ float NoScore() { return __uint_as_float(0x7fffffffu); }

// A bfloat16 score as its 16 bits (the kernels only widen it: no arithmetic in bf16).
struct Bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(Bf16 v) { return __uint_as_float(uint32_t(v.bits) << 16); }

// Larger key = better score; -0 ties +0; NaN / -inf are handled by KeyOf, not here.
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  const uint32_t u = __float_as_uint(v + 0.0f);  // -0 + 0 = +0: both zeros one key, in one add
  return u ^ (uint32_t(int32_t(u) >> 31) | 0x80000000u);  // negative: ~u; else: u | sign bit
}

// The largest key below the bin that starts at `lo` (keys 0 are never taken, so 0 for lo = 0).
__device__ __forceinline__ uint32_t Below(uint32_t lo) { return lo == 0 ? 0 : lo - 1; }

// The least score v with OrderedKey(v) >= `key` (1 <= key <= 2^32) among those that may be
// selected (not NaN, not -inf), so that for them OrderedKey(v) >= key iff v >= LeastScoreOf(key):
// one float compare a score, NaN failing it. NaN where no such score's key reaches `key`. Exact
// because denormals are compared as they are (the build never flushes them: no -ftz).
__device__ __forceinline__ float LeastScoreOf(uint64_t key) {
  constexpr uint32_t kLowestFinite = 0x00800000u;                 // OrderedKey(-FLT_MAX)
  constexpr uint32_t kInf = 0xff800000u;                          // OrderedKey(+inf)
  if (key <= kLowestFinite) return __uint_as_float(0xff7fffffu);  // -FLT_MAX
  if (key > kInf) return __uint_as_float(0x7fc00000u);            // NaN: none
  const uint32_t k = uint32_t(key);  // a key of +0 .. +inf, or of -FLT_MAX .. -0 (then ~k)
  return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

// Score type T: float or Bf16 (the kernels are instantiated for both).
template <class T>
struct Row {
  const T* scores;              // the row's position 0
  int64_t len;                  // positions (or blocks) that may be selected
  int64_t lo, hi;               // this CTA's chunk
  int64_t newest;               // kCandidateBlocks: the pinned block
  const uint32_t* member_bits;  // this CTA's candidate bitmap (kPositions with members)
  int64_t member_base;          // first block covered by member_bits
};

// Row `row`, split in chunks of `chunk`; this CTA takes chunk `rank`. Lengths and starts are
// clamped, so nothing past the row is ever read whatever the caller passed.
template <class T>
__device__ __forceinline__ Row<T> RowChunk(const TopkArgs& a, int64_t row, int64_t chunk,
                                           int rank) {
  Row<T> r;
  const int64_t start = a.starts ? min(max(int64_t(a.starts[row]), int64_t(0)), a.n) : 0;
  r.scores = static_cast<const T*>(a.scores) + row * a.n + start;
  const int64_t avail = a.n - start;
  const bool blocks = a.mode == TopkMode::kCandidateBlocks;
  const int64_t raw =
      min(max(int64_t(a.lens[row]), int64_t(0)), blocks ? avail * a.block_size : avail);
  r.len = blocks ? (raw + a.block_size - 1) / a.block_size : raw;
  r.newest = r.len - 1;
  r.lo = min(int64_t(rank) * chunk, r.len);
  r.hi = min(r.lo + chunk, r.len);
  r.member_bits = nullptr;
  r.member_base = 0;
  return r;
}

// A score's key where every position may be selected (kPositions, no member bitmap).
__device__ __forceinline__ uint32_t PositionKey(float v) {
  return v > -INFINITY ? OrderedKey(v) : kExcluded;  // false for NaN and -inf
}

template <class T>
__device__ __forceinline__ uint32_t KeyOf(const TopkArgs& a, const Row<T>& r, int64_t p, float v) {
  if (a.mode == TopkMode::kCandidateBlocks) {
    if (p == r.newest) return kPinned;
    const uint32_t key = OrderedKey(v);
    return (v != v || v == -INFINITY || key < 2) ? kLowest : key;
  }
  if (r.member_bits != nullptr) {
    const int64_t b = p / a.block_size - r.member_base;
    if (!((r.member_bits[b >> 5] >> (b & 31)) & 1u)) return kExcluded;
  }
  return PositionKey(v);
}

// Whether the chunk's first score is 16-byte aligned (whole-vector loads).
template <class T>
__device__ __forceinline__ bool Aligned(const Row<T>& r) {
  return (reinterpret_cast<uintptr_t>(r.scores + r.lo) & 15) == 0;
}

// Element j of scores packed in 32-bit words: a float word, or one half of a word of two bf16
// (little endian: the lower half is the earlier element).
__device__ __forceinline__ float Unpack(const uint32_t* w, int j, float) {
  return __uint_as_float(w[j]);
}
__device__ __forceinline__ float Unpack(const uint32_t* w, int j, Bf16) {
  return __uint_as_float(j % 2 ? w[j / 2] & 0xffff0000u : w[j / 2] << 16);
}

// Scores of chunk elements [i0, i0 + kPer) as float, all in the chunk and 16-byte aligned: whole
// 16-byte loads.
template <int kPer, class T>
__device__ __forceinline__ void LoadWholeScores(const Row<T>& r, int64_t i0, float (&v)[kPer]) {
  constexpr int kWords = kPer * int(sizeof(T)) / 4;
  static_assert(kWords % 4 == 0, "whole 16-byte loads");
  const uint4* src = reinterpret_cast<const uint4*>(r.scores + r.lo + i0);
  uint32_t w[kWords];
#pragma unroll
  for (int q = 0; q < kWords / 4; ++q) {
    const uint4 x = src[q];
    w[4 * q] = x.x, w[4 * q + 1] = x.y, w[4 * q + 2] = x.z, w[4 * q + 3] = x.w;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) v[j] = Unpack(w, j, T{});
}

// Scores of chunk elements [i0, i0 + kPer) as float (NoScore past the chunk's `mine` elements),
// loads issued together (16-byte loads when aligned) so a thread has them all in flight at once.
template <int kPer, class T>
__device__ __forceinline__ void LoadScores(const Row<T>& r, int64_t mine, int64_t i0, bool aligned,
                                           float (&v)[kPer]) {
  if (aligned && i0 + kPer <= mine) {
    LoadWholeScores<kPer>(r, i0, v);
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      v[j] = i0 + j < mine ? ToFloat(r.scores[r.lo + i0 + j]) : NoScore();
    }
  }
}

// The keys of those scores (kExcluded past the chunk).
template <int kPer, class T>
__device__ __forceinline__ void ScoresToKeys(const TopkArgs& a, const Row<T>& r, int64_t mine,
                                             int64_t i0, const float (&v)[kPer],
                                             uint32_t (&out)[kPer]) {
  const int64_t left = mine - i0;  // of these kPer elements, the first `left` are the chunk's
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    out[j] = j < left ? KeyOf(a, r, r.lo + i0 + j, v[j]) : kExcluded;
  }
}

template <int kPer, class T>
__device__ __forceinline__ void LoadKeys(const TopkArgs& a, const Row<T>& r, int64_t mine,
                                         int64_t i0, bool aligned, uint32_t (&out)[kPer]) {
  float v[kPer];
  LoadScores<kPer>(r, mine, i0, aligned, v);
  ScoresToKeys<kPer>(a, r, mine, i0, v, out);
}

// Launches `kernel(args, chunk)` on `rows * cluster` CTAs of `threads`, in clusters of `cluster`
// (one row per cluster).
template <class Kernel>
cudaError_t LaunchRowClusters(Kernel kernel, const TopkArgs& args, int64_t chunk, int cluster,
                              int threads, size_t smem, cudaStream_t stream) {
  return LaunchKernel(kernel, dim3(unsigned(args.rows * cluster)), dim3(unsigned(threads)), smem,
                      stream, unsigned(cluster), args, chunk);
}

}  // namespace topk
}  // namespace dsv41
