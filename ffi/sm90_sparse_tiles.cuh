// The pieces of the SM90 sparse kernels that load and score a row's candidate blocks, shared so
// that the logits kernel (sm90_sparse_logits.cu) and the on-chip select (sm90_sparse_select.cu)
// compute every logit with the same instructions, bitwise DeepGEMM's dense SM90 kernel's.
//
// A tile is 64 columns of the row: 8 candidate blocks of 8 tokens, each located through the
// table's `physical` slots and copied by 16-byte cp.async into the shared-memory layout of one
// 64-token page as TMA's 128B swizzle lays it out, so the math is DeepGEMM's, instruction for
// instruction: the same WGMMA (M 64 positions, N heads, K 32, four K steps in order), the same
// ReLU-weighted head sum in the same order, the same scale product and quad shuffles. Producer
// warps stage tiles through a ring of mbarrier'd buffers; math warpgroups take them in turn.
// cp.async rather than TMA: a block is only 1 KiB, and a TMA box a block measured slower on the
// H200 (the TMA unit's operations an SM, not bytes, bound it).
#pragma once

#include <cutlass/arch/barrier.h>
#include <deep_gemm/common/math.cuh>
#include <deep_gemm/mma/sm90.cuh>
#include <deep_gemm/ptx/ld_st.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

#include <cstdint>

namespace dsv41 {
namespace sparse_tiles {

constexpr uint32_t kHeadDim = 128;
constexpr uint32_t kPageSize = 64;  // tokens a cache page
constexpr uint32_t kBlock = 8;      // tokens a candidate block
constexpr uint32_t kTile = 64;      // columns a tile: DeepGEMM's BLOCK_KV
constexpr uint32_t kBlocksPerTile = kTile / kBlock;
constexpr uint32_t kMathThreads = 128;               // one math warpgroup
constexpr uint32_t kTileBytes = kTile * kHeadDim;    // 8 KiB of values
constexpr uint32_t kBlockBytes = kBlock * kHeadDim;  // 1 KiB: one 8-row swizzle atom
constexpr uint32_t kScaleSlot = 8;                   // floats between two blocks' scales

using Barrier = cutlass::arch::ClusterTransactionBarrier;

// The staging ring and the row's q, 1024-aligned (the 128B swizzle's period).
template <uint32_t kHeads, uint32_t kStages>
struct alignas(1024) Ring {
  uint8_t kv[kStages][kTileBytes];
  uint8_t q[kHeads * kHeadDim];
  float scales[kStages][kBlocksPerTile * kScaleSlot];
  uint64_t full[kStages], empty[kStages], q_full;
};

// The ring at the first 1024-aligned byte of dynamic shared memory (its size + 1024 asked). An
// offset from `smem_raw`, not an integer made a pointer: the compiler still knows what follows is
// shared memory and emits shared loads and atomics (generic atomics there cost several times more).
template <class R>
__device__ __forceinline__ R& AlignedRing(uint8_t* smem_raw) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return *reinterpret_cast<R*>(smem_raw + ((1024 - at % 1024) % 1024));
}

// One thread, before any use: `consumers` threads free a stage; a stage (and q) is full once
// each lane of its producer warp saw its copies land.
template <class R>
__device__ __forceinline__ void InitRing(R& s, uint32_t consumers) {
  constexpr uint32_t kStages = sizeof(s.full) / sizeof(s.full[0]);
  auto full = reinterpret_cast<Barrier*>(s.full), empty = reinterpret_cast<Barrier*>(s.empty);
  for (uint32_t i = 0; i < kStages; ++i) {
    full[i].init(32);
    empty[i].init(consumers);
  }
  reinterpret_cast<Barrier*>(&s.q_full)->init(32);
  cutlass::arch::fence_barrier_init();
}

// 16 bytes from global to shared memory, asynchronously; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(bytes));
}

// The barrier gets this thread's arrival once its earlier copies landed (counted by its init).
__device__ __forceinline__ void ArriveWhenCopied(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
      static_cast<uint32_t>(__cvta_generic_to_shared(barrier))));
}

// Byte offset of 16-byte piece `piece` of 128-byte row `r` in a 1024-aligned buffer laid out as
// TMA's 128B swizzle lays it (what the WGMMA descriptors' swizzle mode reads).
__device__ __forceinline__ uint32_t Swizzled(uint32_t r, uint32_t piece) {
  return r * 128 + ((piece ^ (r % 8)) * 16);
}

// The scales a block on no page reads: NaN, so its logits are NaN, as on the dense kernel's bad
// pages.
static __device__ uint4 g_nan_scales = {0x7fffffffu, 0x7fffffffu, 0x7fffffffu, 0x7fffffffu};

// One producer warp: when `loads_q` the row's q (q_row: heads x 128 bytes) first, then tiles
// start, start + step, ... below `tiles`, tile i (slots [8 i, 8 i + 8) of `slots`) into stage
// i % kStages once its consumers freed it. Block b's 1 KiB of values is two warp-wide copies of
// 512 contiguous bytes; lanes 2 b and 2 b + 1 copy its 8 scales. A slot < 0 or a page past the
// cache reads nothing: zero values, NaN scales.
template <uint32_t kHeads, uint32_t kStages>
__device__ __forceinline__ void ProduceTiles(Ring<kHeads, kStages>& s, const uint8_t* q_row,
                                             bool loads_q, const uint8_t* kv, int64_t num_pages,
                                             const int32_t* slots, uint32_t tiles, uint32_t start,
                                             uint32_t step, uint32_t lane) {
  auto empty = reinterpret_cast<Barrier*>(s.empty);
  constexpr uint64_t kPageBytes = kPageSize * (kHeadDim + 4);
  constexpr int32_t kBlocksPerPage = kPageSize / kBlock;
  if (loads_q) {
    for (uint32_t j = lane; j < kHeads * kHeadDim / 16; j += 32)
      CopyAsync16(s.q + Swizzled(j / 8, j % 8), q_row + j * 16, 16);
    ArriveWhenCopied(&s.q_full);
  }
  // Lane l < 8 holds the slot of block l of the next tile: loaded a tile ahead of its use.
  int32_t next = start < tiles ? slots[start * kBlocksPerTile + lane % kBlocksPerTile] : 0;
  for (uint32_t i = start; i < tiles; i += step) {
    const int32_t mine = next;
    if (i + step < tiles) next = slots[(i + step) * kBlocksPerTile + lane % kBlocksPerTile];
    const uint32_t stage = i % kStages, phase = (i / kStages) & 1;
    empty[stage].wait(phase ^ 1);
#pragma unroll
    for (uint32_t b = 0; b < kBlocksPerTile; ++b) {
      const int32_t slot = __shfl_sync(0xffffffffu, mine, int(b));
      const int64_t page = slot >= 0 ? slot / kBlocksPerPage : -1;
      const bool on_page = page >= 0 && page < num_pages;
      const uint8_t* block =
          on_page ? kv + uint64_t(page) * kPageBytes + uint64_t(slot % kBlocksPerPage) * kBlockBytes
                  : kv;
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h) {
        const uint32_t piece = h * 32 + lane;  // of the block's 64
        CopyAsync16(s.kv[stage] + b * kBlockBytes + Swizzled(piece / 8, piece % 8),
                    block + (on_page ? piece * 16 : 0), on_page ? 16 : 0);
      }
    }
    if (lane < 2 * kBlocksPerTile) {
      const int32_t slot = __shfl_sync(0x0000ffffu, mine, int(lane / 2));
      const int64_t page = slot >= 0 ? slot / kBlocksPerPage : -1;
      const uint8_t* src = page >= 0 && page < num_pages
                               ? kv + uint64_t(page) * kPageBytes + kPageSize * kHeadDim +
                                     uint64_t(slot % kBlocksPerPage) * kBlock * 4 + (lane % 2) * 16
                               : reinterpret_cast<const uint8_t*>(&g_nan_scales);
      CopyAsync16(s.scales[stage] + (lane / 2) * kScaleSlot + (lane % 2) * 4, src, 16);
    }
    ArriveWhenCopied(&s.full[stage]);
  }
}

// A math warpgroup's part of the row: DeepGEMM's per-thread weights (kNextN = 1).
template <uint32_t kHeads>
struct Scorer {
  float w[kHeads / 4];
  uint32_t sub_warp, v0_at, v1_at;  // the tile positions this thread's quad scores

  __device__ __forceinline__ Scorer(const float* row_weights, uint32_t warp, uint32_t lane)
      : sub_warp((warp % 4) * 16), v0_at(lane / 4), v1_at(lane / 4 + 8) {
#pragma unroll
    for (uint32_t j = 0; j < kHeads / 4; ++j)
      w[j] = row_weights[(j / 2) * 8 + (j & 1) + (lane % 4) * 2];
  }

  // Scores the tile in `stage` once it is full (tile i of the ring: its phase) and frees the
  // stage: the logits of tile positions sub_warp + v0_at and sub_warp + v1_at, in every lane of
  // the quad (the shuffles add the same four terms).
  template <uint32_t kStages>
  __device__ __forceinline__ void Score(Ring<kHeads, kStages>& s, uint32_t stage, uint32_t phase,
                                        uint32_t lane, float& v0, float& v1) const {
    using WGMMA = typename deep_gemm::mma::sm90::FP8MMASelector<kHeads>::type;
    auto full = reinterpret_cast<Barrier*>(s.full), empty = reinterpret_cast<Barrier*>(s.empty);
    float accum[WGMMA::kNumAccum];
    full[stage].wait(phase);
    // The copies wrote through the generic proxy; the WGMMA reads through the async one.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
    for (uint32_t j = 0; j < WGMMA::kNumAccum; ++j)
      deep_gemm::ptx::warpgroup_fence_operand(accum[j]);
    deep_gemm::ptx::warpgroup_arrive();
#pragma unroll
    for (uint32_t k = 0; k < kHeadDim / WGMMA::K; ++k) {
      auto desc_a = deep_gemm::mma::sm90::make_smem_desc(
          s.kv[stage] + k * WGMMA::K, deep_gemm::mma::sm90::to_swizzle_cute_type<kHeadDim>(), 0,
          kHeadDim * 8);
      auto desc_b = deep_gemm::mma::sm90::make_smem_desc(
          s.q + k * WGMMA::K, deep_gemm::mma::sm90::to_swizzle_cute_type<kHeadDim>(), 0,
          kHeadDim * 8);
      WGMMA::wgmma(desc_a, desc_b, accum, k);
    }
    deep_gemm::ptx::warpgroup_commit_batch();
#pragma unroll
    for (uint32_t j = 0; j < WGMMA::kNumAccum; ++j)
      deep_gemm::ptx::warpgroup_fence_operand(accum[j]);
    // Position p of the tile is token p % 8 of block p / 8: its scale sits in that block's slot.
    const uint32_t p0 = sub_warp + v0_at, p1 = sub_warp + v1_at;
    const float scale_0 =
        deep_gemm::ptx::ld_shared(s.scales[stage] + (p0 / kBlock) * kScaleSlot + p0 % kBlock);
    const float scale_1 =
        deep_gemm::ptx::ld_shared(s.scales[stage] + (p1 / kBlock) * kScaleSlot + p1 % kBlock);
    deep_gemm::ptx::warpgroup_wait<0>();
    empty[stage].arrive();

    const auto transform = [&](uint32_t j) {
      return fmaxf(accum[j], 0) * w[(j / 4) * 2 + (j & 1)];
    };
    float sum[4] = {transform(0), transform(1), transform(2), transform(3)};
#pragma unroll
    for (uint32_t j = 1; j < kHeads / 8; ++j) {
#pragma unroll
      for (uint32_t k = 0; k < 4; k++) sum[k] += transform(j * 4 + k);
    }
    v0 = (sum[0] + sum[1]) * scale_0;
    v1 = (sum[2] + sum[3]) * scale_1;
#pragma unroll
    for (uint32_t j = 0; j < 2; ++j) {
      const int offset = int(1u << j);
      v0 += __shfl_xor_sync(0xffffffffu, v0, offset);
      v1 += __shfl_xor_sync(0xffffffffu, v1, offset);
    }
  }
};

constexpr uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace sparse_tiles
}  // namespace dsv41
