// The pieces of the SM90 sparse kernels that load and score a row's candidate blocks, shared so
// that the logits kernel (sm90_sparse_logits.cu) and the on-chip select (sm90_sparse_select.cu)
// compute every logit with the same instructions, bitwise DeepGEMM's dense SM90 kernel's.
//
// A tile is 64 columns of the row: 8 candidate blocks of 8 tokens, each located through the
// table's `physical` slots and loaded by its own TMA box into the shared-memory layout of one
// 64-token page (8-row boxes of a 128B-swizzled map stack into exactly that layout), so the math
// is DeepGEMM's, instruction for instruction: the same WGMMA (M 64 positions, N heads, K 32, four
// K steps in order), the same ReLU-weighted head sum in the same order, the same scale product
// and quad shuffles. One producer warp stages tiles through a ring of mbarrier'd buffers; math
// warpgroups take them in turn.
#pragma once

#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90_tma.hpp>
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
constexpr uint32_t kScaleSlot = 32;                  // floats between two blocks' scales

using Barrier = cutlass::arch::ClusterTransactionBarrier;

// The staging ring and the row's q, 1024-aligned (the 128B swizzle's period); a TMA destination
// of the scales is 128-byte aligned, hence one 128-byte slot a block.
template <uint32_t kHeads, uint32_t kStages>
struct alignas(1024) Ring {
  uint8_t kv[kStages][kTileBytes];
  uint8_t q[kHeads * kHeadDim];
  float scales[kStages][kBlocksPerTile * kScaleSlot];
  uint64_t full[kStages], empty[kStages], q_full;
};

// The ring at the first 1024-aligned byte of dynamic shared memory (its size + 1024 asked).
template <class R>
__device__ __forceinline__ R& AlignedRing(uint8_t* smem_raw) {
  return *reinterpret_cast<R*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// Producer lanes [kScaleLanes, 2 kScaleLanes) copy a tile's scales, 16 bytes each, with cp.async:
// a block's 8 scales are 32 bytes, too small to be worth a TMA operation of their own (the TMA
// unit's operations an SM, not bytes, bound these kernels).
constexpr uint32_t kScaleLanes = 2 * kBlocksPerTile;

// One thread, before any use: `consumers` threads free a stage; a stage is full once the values'
// TMA bytes landed and every scale lane's copies did.
template <class R>
__device__ __forceinline__ void InitRing(R& s, uint32_t consumers) {
  constexpr uint32_t kStages = sizeof(s.full) / sizeof(s.full[0]);
  auto full = reinterpret_cast<Barrier*>(s.full), empty = reinterpret_cast<Barrier*>(s.empty);
  for (uint32_t i = 0; i < kStages; ++i) {
    full[i].init(1 + kScaleLanes);
    empty[i].init(consumers);
  }
  reinterpret_cast<Barrier*>(&s.q_full)->init(1);
  cutlass::arch::fence_barrier_init();
}

// The producer warp: the row's q, then `tiles` tiles of the row, tile i (slots [8 i, 8 i + 8)
// of `slots`) into stage i % kStages once its consumers freed it. Lane b < 8 loads block b's
// values (one TMA box); lanes 8 + 2 b + h copy its scales [4 h, 4 h + 4).
template <uint32_t kHeads, uint32_t kStages>
__device__ __forceinline__ void ProduceTiles(Ring<kHeads, kStages>& s, const CUtensorMap& q_map,
                                             const CUtensorMap& kv_map, const uint8_t* kv,
                                             int64_t num_pages, const int32_t* slots, uint32_t row,
                                             uint32_t tiles, uint32_t lane) {
  auto full = reinterpret_cast<Barrier*>(s.full), empty = reinterpret_cast<Barrier*>(s.empty);
  constexpr uint64_t kHint = uint64_t(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  constexpr uint64_t kPageBytes = kPageSize * (kHeadDim + 4);
  if (lane == 0) {
    auto q_full = reinterpret_cast<Barrier*>(&s.q_full);
    cute::prefetch_tma_descriptor(&kv_map);
    cute::SM90_TMA_LOAD_2D::copy(&q_map, reinterpret_cast<uint64_t*>(q_full), kHint, s.q, 0,
                                 int32_t(row * kHeads));
    q_full->arrive_and_expect_tx(kHeads * kHeadDim);
  }
  const bool values = lane < kBlocksPerTile;
  const bool scales = lane >= kBlocksPerTile && lane < kBlocksPerTile + kScaleLanes;
  const uint32_t block = values ? lane : (lane - kBlocksPerTile) / 2,
                 half = (lane - kBlocksPerTile) % 2;
  for (uint32_t i = 0; i < tiles; ++i) {
    const uint32_t stage = i % kStages, phase = (i / kStages) & 1;
    const int32_t slot = values || scales ? slots[i * kBlocksPerTile + block] : 0;
    // Padding (-1) and a page past the cache: zero values (TMA's out-of-bounds fill, page -1 or
    // past the map) and NaN scales, so NaN logits, as on the dense kernel's bad pages.
    const int32_t page = slot >= 0 ? slot / int32_t(kPageSize / kBlock) : -1;
    const int32_t token = slot >= 0 ? (slot % int32_t(kPageSize / kBlock)) * int32_t(kBlock) : 0;
    empty[stage].wait(phase ^ 1);
    if (values) {
      cute::SM90_TMA_LOAD_3D::copy(&kv_map, reinterpret_cast<uint64_t*>(&full[stage]), kHint,
                                   s.kv[stage] + lane * kBlockBytes, 0, token, page);
    } else if (scales) {
      float* dst = s.scales[stage] + block * kScaleSlot + half * 4;
      const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full[stage]));
      if (page >= 0 && page < num_pages) {
        const uint8_t* src = kv + uint64_t(page) * kPageBytes + kPageSize * kHeadDim +
                             uint64_t(token + half * 4) * 4;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                         static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                     "l"(src));
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar));
      } else {
        for (int j = 0; j < 4; ++j) dst[j] = __int_as_float(0x7fffffff);
        full[stage].arrive();
      }
    }
    __syncwarp();
    if (lane == 0) full[stage].arrive_and_expect_tx(kTileBytes);
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

// Maps over the paged cache for one call: q [rows·heads, 128] 128B-swizzled, one row's heads a
// box; the values of each page's tokens, 8 rows a box (one candidate block). False when an
// encoding failed.
bool EncodeSparseMaps(CUtensorMap& q_map, CUtensorMap& kv_map, const void* q, int64_t q_rows,
                      uint32_t heads, const uint8_t* kv, int64_t num_pages);

constexpr uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace sparse_tiles
}  // namespace dsv41
