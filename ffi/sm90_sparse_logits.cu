// dsv41_sm90_sparse_logits <-> SparseLogitsSm90FFI <-> dsv41_jax.sparse_paged_mqa_logits("ffi")
//
// The logits of each query row over its candidate blocks only, scored where they lie in the
// paged fp8 cache. A tile is 64 columns of the row: 8 candidate blocks of 8 tokens, each located
// through the table's `physical` slots and loaded by its own TMA box into the shared-memory
// layout of one 64-token page (8-row boxes of a 128B-swizzled map stack into exactly that
// layout), so the math is DeepGEMM's dense SM90 kernel's, instruction for instruction: the same
// WGMMA (M 64 positions, N heads, K 32, four K steps in order), the same ReLU-weighted head sum
// in the same order, the same scale product and quad shuffles. A logit is therefore bitwise the
// dense kernel's at the same position, whatever tile it falls in.
//
// A CTA is one math warpgroup and one producer warp, over a contiguous range of one row's tiles
// (several CTAs an SM hide each other's latency); the producer stages tiles through a ring of
// kStages buffers with mbarriers. Tiles at or past the row's valid length are skipped.
#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <deep_gemm/common/math.cuh>
#include <deep_gemm/mma/sm90.cuh>
#include <deep_gemm/ptx/ld_st.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

#include <algorithm>

#include "sm90_sparse_logits.h"
#include "smxx_launch.cuh"
#include "tma.h"

namespace dsv41 {
namespace {

constexpr uint32_t kHeadDim = 128;
constexpr uint32_t kPageSize = 64;  // tokens a cache page
constexpr uint32_t kBlock = 8;      // tokens a candidate block
constexpr uint32_t kTile = 64;      // columns a tile: DeepGEMM's BLOCK_KV
constexpr uint32_t kBlocksPerTile = kTile / kBlock;
constexpr uint32_t kStages = 4;
constexpr uint32_t kMathThreads = 128, kThreads = kMathThreads + 32;
constexpr uint32_t kCtasPerSm = 4;
constexpr uint32_t kTileBytes = kTile * kHeadDim;    // 8 KiB of values
constexpr uint32_t kBlockBytes = kBlock * kHeadDim;  // 1 KiB: one 8-row swizzle atom
constexpr uint32_t kScaleSlot = 32;                  // floats between two blocks' scales
constexpr uint32_t kScaleBoxBytes = kBlock * 4;      // one block's 8 scales
constexpr CUtensorMapL2promotion kScaleL2 = CU_TENSOR_MAP_L2_PROMOTION_L2_64B;

// Dynamic shared memory, 1024-aligned by hand (the 128B swizzle's period); a TMA destination of
// the scales is 128-byte aligned, hence one 128-byte slot a block.
template <uint32_t kHeads>
struct alignas(1024) Smem {
  uint8_t kv[kStages][kTileBytes];
  uint8_t q[kHeads * kHeadDim];
  float scales[kStages][kBlocksPerTile * kScaleSlot];
  uint64_t full[kStages], empty[kStages], q_full;
};

template <uint32_t kHeads>
constexpr size_t SmemBytes() {
  return sizeof(Smem<kHeads>) + 1024;
}

constexpr uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

template <uint32_t kHeads>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    SparseLogitsKernel(const __grid_constant__ CUtensorMap q_map,
                       const __grid_constant__ CUtensorMap kv_map,
                       const __grid_constant__ CUtensorMap scale_map,
                       const float* __restrict__ weights, const int32_t* __restrict__ physical,
                       const int32_t* __restrict__ valid_lens, float* __restrict__ logits,
                       uint32_t c, uint32_t tiles_per_cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using WGMMA = typename deep_gemm::mma::sm90::FP8MMASelector<kHeads>::type;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  extern __shared__ uint8_t smem_raw[];
  auto& s = *reinterpret_cast<Smem<kHeads>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  auto full = reinterpret_cast<Barrier*>(s.full), empty = reinterpret_cast<Barrier*>(s.empty);
  auto q_full = reinterpret_cast<Barrier*>(&s.q_full);

  const uint32_t row = blockIdx.y, row_cols = c * kBlock;
  const uint32_t len = uint32_t(min(max(valid_lens[row], 0), int32_t(row_cols)));
  const uint32_t first = blockIdx.x * tiles_per_cta;
  const uint32_t last = min(first + tiles_per_cta, CeilDiv(len, kTile));
  if (first >= last) return;  // the whole CTA: nothing of this row's length is in its range
  const uint32_t tiles = last - first;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == kMathThreads) {
    for (uint32_t i = 0; i < kStages; ++i) {
      full[i].init(1);
      empty[i].init(kMathThreads);
    }
    q_full->init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  constexpr uint64_t kHint = uint64_t(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  if (warp == kMathThreads / 32) {  // producer
    if (lane == 0) {
      cute::prefetch_tma_descriptor(&kv_map);
      cute::prefetch_tma_descriptor(&scale_map);
      cute::SM90_TMA_LOAD_2D::copy(&q_map, reinterpret_cast<uint64_t*>(q_full), kHint, s.q, 0,
                                   int32_t(row * kHeads));
      q_full->arrive_and_expect_tx(kHeads * kHeadDim);
    }
    const int32_t* slots = physical + uint64_t(row) * c;
    for (uint32_t i = 0; i < tiles; ++i) {
      const uint32_t stage = i % kStages, phase = (i / kStages) & 1;
      const int32_t slot = lane < kBlocksPerTile ? slots[(first + i) * kBlocksPerTile + lane] : 0;
      empty[stage].wait(phase ^ 1);
      if (lane < kBlocksPerTile) {
        // Padding (-1) reads page -1 and a page past the cache reads past it: out of bounds,
        // zero values and NaN scales, so NaN logits, as on the dense kernel's bad pages.
        const int32_t page = slot >= 0 ? slot / int32_t(kPageSize / kBlock) : -1;
        const int32_t token =
            slot >= 0 ? (slot % int32_t(kPageSize / kBlock)) * int32_t(kBlock) : 0;
        auto bar = reinterpret_cast<uint64_t*>(&full[stage]);
        cute::SM90_TMA_LOAD_3D::copy(&kv_map, bar, kHint, s.kv[stage] + lane * kBlockBytes, 0,
                                     token, page);
        cute::SM90_TMA_LOAD_2D::copy(&scale_map, bar, kHint, s.scales[stage] + lane * kScaleSlot,
                                     token, page);
      }
      __syncwarp();
      if (lane == 0) full[stage].arrive_and_expect_tx(kTileBytes + kBlocksPerTile * kScaleBoxBytes);
    }
    return;
  }

  // Math warpgroup: DeepGEMM's per-thread weights, accumulators and reduction (kNextN = 1).
  float accum[WGMMA::kNumAccum], w[kHeads / 4];
  const uint32_t sub_warp = (warp % 4) * 16, v0_at = lane / 4, v1_at = lane / 4 + 8;
  const float* row_weights = weights + uint64_t(row) * kHeads;
#pragma unroll
  for (uint32_t j = 0; j < kHeads / 4; ++j)
    w[j] = row_weights[(j / 2) * 8 + (j & 1) + (lane % 4) * 2];
  q_full->wait(0);
  float* out = logits + uint64_t(row) * row_cols;
  for (uint32_t i = 0; i < tiles; ++i) {
    const uint32_t stage = i % kStages, phase = (i / kStages) & 1;
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
    float v0 = (sum[0] + sum[1]) * scale_0;
    float v1 = (sum[2] + sum[3]) * scale_1;
#pragma unroll
    for (uint32_t j = 0; j < 2; ++j) {
      const int offset = int(1u << j);
      v0 += __shfl_xor_sync(0xffffffffu, v0, offset);
      v1 += __shfl_xor_sync(0xffffffffu, v1, offset);
    }
    if (lane % 4 == 0) {  // the quad holds one value (the shuffles add the same four terms)
      float* tile = out + (first + i) * kTile + sub_warp;
      tile[v0_at] = v0;
      tile[v1_at] = v1;
    }
  }
#endif
}

PerDevice g_num_sms;  // recorded by PrepareSparseLogitsSm90

template <uint32_t kHeads>
cudaError_t Launch(cudaStream_t stream, const Sm90SparseLogits& c, uint32_t num_sms,
                   const CUtensorMap& q_map, const CUtensorMap& kv_map,
                   const CUtensorMap& scale_map) {
  // Enough CTAs to fill every SM kCtasPerSm times when the rows are full, at least two tiles a
  // CTA (each CTA loads its row's q once).
  const uint32_t row_tiles = uint32_t(c.c) / kBlocksPerTile;
  const uint64_t slots = uint64_t(num_sms) * kCtasPerSm;
  const uint32_t per = std::min<uint32_t>(
      row_tiles,
      std::max<uint32_t>(2, uint32_t((uint64_t(c.rows) * row_tiles + slots - 1) / slots)));
  const dim3 grid(CeilDiv(row_tiles, per), uint32_t(c.rows));
  return LaunchKernel(SparseLogitsKernel<kHeads>, grid, dim3(kThreads), SmemBytes<kHeads>(), stream,
                      0, q_map, kv_map, scale_map, c.weights, c.physical, c.valid_lens, c.logits,
                      uint32_t(c.c), per);
}

}  // namespace

ffi::ErrorOr<Sm90SparseLogits> Sm90SparseLogitsOf(const char* op, const ffi::AnyBuffer& q,
                                                  const Buffer<ffi::F32>& weights,
                                                  const Buffer<ffi::U8>& kv,
                                                  const Buffer<ffi::S32>& physical,
                                                  const Buffer<ffi::S32>& valid_lens,
                                                  const Buffer<ffi::F32>& logits) {
  if (q.element_type() != ffi::F8E4M3FN) return InvalidArgument(op, "q must be float8_e4m3fn");
  const auto qd = q.dimensions(), kd = kv.dimensions(), pd = physical.dimensions();
  const auto ld = logits.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || pd.size() != 2 || ld.size() != 2) {
    return InvalidArgument(op,
                           "expected q [b, n, h, d], cache [pages, 64, 1, 132], "
                           "physical [rows, C], logits [rows, C * 8]");
  }
  const int64_t rows = qd[0] * qd[1], heads = qd[2], c = pd[1];
  if (qd[3] != kHeadDim || (heads != 32 && heads != 64) || kd[1] != kPageSize || kd[2] != 1 ||
      kd[3] != kHeadDim + 4) {
    return InvalidArgument(op,
                           "needs head_dim 128, 32 or 64 heads and an fp8 cache of 64-token pages");
  }
  if (c <= 0 || c % kBlocksPerTile != 0)
    return InvalidArgument(op, "needs C a positive multiple of 8");
  if (pd[0] != rows || valid_lens.element_count() != rows || ld[0] != rows || ld[1] != c * kBlock ||
      weights.element_count() != rows * heads) {
    return InvalidArgument(op, "inconsistent shapes");
  }
  if (rows > 65535 || c * kBlock > (int64_t(1) << 30) || kd[0] > (int64_t(1) << 31) - 1) {
    return InvalidArgument(op, "at most 65535 rows, 2^30 columns and 2^31 - 1 pages");
  }
  if (rows > 0 && kd[0] == 0) return InvalidArgument(op, "empty cache");
  return Sm90SparseLogits{q.untyped_data(),
                          weights.typed_data(),
                          kv.typed_data(),
                          physical.typed_data(),
                          valid_lens.typed_data(),
                          logits.typed_data(),
                          rows,
                          heads,
                          kd[0],
                          c};
}

ffi::Error LaunchSm90SparseLogits(const char* op, cudaStream_t stream, const Sm90SparseLogits& c) {
  if (c.rows == 0) return ffi::Error::Success();
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0) {
    return ffi::Error::Internal(std::string(op) + ": device not prepared (dsv41_jax._ext.prepare)");
  }
  // q [rows·heads, 128] 128B-swizzled, one row's heads a box; the values of each page's tokens,
  // 8 rows a box (one candidate block); the scales after each page's values, 8 a box (NaN out of
  // bounds), fetched into L2 in 64-byte pieces rather than 256 (a block's scales are 32 bytes).
  const uint64_t page_bytes = kPageSize * (kHeadDim + 4);
  CUtensorMap q_map, kv_map, scale_map;
  const bool ok = EncodeTiled(&q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, c.q,
                              {kHeadDim, uint64_t(c.rows * c.heads)}, {kHeadDim},
                              {kHeadDim, uint32_t(c.heads)}, CU_TENSOR_MAP_SWIZZLE_128B) &&
                  EncodeTiled(&kv_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, c.kv,
                              {kHeadDim, kPageSize, uint64_t(c.num_pages)}, {kHeadDim, page_bytes},
                              {kHeadDim, kBlock, 1}, CU_TENSOR_MAP_SWIZZLE_128B) &&
                  EncodeTiled(&scale_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                              c.kv + kPageSize * kHeadDim, {kPageSize, uint64_t(c.num_pages)},
                              {page_bytes}, {kBlock, 1}, CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA, kScaleL2);
  if (!ok) return ffi::Error::Internal(std::string(op) + ": cuTensorMapEncodeTiled failed");
  const auto launch = c.heads == 32 ? Launch<32> : Launch<64>;
  return CudaStatus(op, launch(stream, c, uint32_t(num_sms), q_map, kv_map, scale_map));
}

cudaError_t PrepareSparseLogitsSm90() {
  g_num_sms.Record(CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount));
  if (g_num_sms.Current() == 0) return cudaErrorInvalidDevice;
  return SetMaxDynamicSmem(SmemBytes<64>(), SparseLogitsKernel<32>, SparseLogitsKernel<64>);
}

namespace {

ffi::Error SparseLogitsSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                            Buffer<ffi::U8> kv, Buffer<ffi::S32> physical,
                            Buffer<ffi::S32> valid_lens, Result<ffi::F32> logits) {
  constexpr const char* kOp = "dsv41_sm90_sparse_logits";
  auto call = Sm90SparseLogitsOf(kOp, q, weights, kv, physical, valid_lens, *logits);
  if (call.has_error()) return call.error();
  return LaunchSm90SparseLogits(kOp, stream, *call);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SparseLogitsSm90FFI, SparseLogitsSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()   // table physical [rows, C]
                                  .Arg<Buffer<ffi::S32>>()   // valid_lens [rows]
                                  .Ret<Buffer<ffi::F32>>(),  // logits [rows, C * 8]
                              kCmdBuffer);

}  // namespace dsv41
