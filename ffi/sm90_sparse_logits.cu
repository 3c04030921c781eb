// dsv41_sm90_sparse_logits <-> SparseLogitsSm90FFI <-> dsv41_jax.sparse_paged_mqa_logits("ffi")
//
// The logits of each query row over its candidate blocks only, scored where they lie in the
// paged fp8 cache (sm90_sparse_tiles.cuh: bitwise DeepGEMM's dense SM90 kernel at the same
// positions, whatever tile a position falls in).
//
// A CTA is one math warpgroup and one producer warp, over a contiguous range of one row's tiles
// (several CTAs an SM hide each other's latency). Tiles at or past the row's valid length are
// skipped.
#include <algorithm>

#include "sm90_sparse_logits.h"
#include "sm90_sparse_tiles.cuh"
#include "smxx_launch.cuh"

namespace dsv41 {
namespace {

using namespace sparse_tiles;

constexpr uint32_t kStages = 4;
constexpr uint32_t kThreads = kMathThreads + 32;
constexpr uint32_t kCtasPerSm = 4;

template <uint32_t kHeads>
constexpr size_t SmemBytes() {
  return sizeof(Ring<kHeads, kStages>) + 1024;
}

template <uint32_t kHeads>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    SparseLogitsKernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ kv,
                       int64_t num_pages, const float* __restrict__ weights,
                       const int32_t* __restrict__ physical, const int32_t* __restrict__ valid_lens,
                       float* __restrict__ logits, uint32_t c, uint32_t tiles_per_cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  auto& s = AlignedRing<Ring<kHeads, kStages>>(smem_raw);
  const uint32_t row = blockIdx.y, row_cols = c * kBlock;
  const uint32_t len = uint32_t(min(max(valid_lens[row], 0), int32_t(row_cols)));
  const uint32_t first = blockIdx.x * tiles_per_cta;
  const uint32_t last = min(first + tiles_per_cta, CeilDiv(len, kTile));
  if (first >= last) return;  // the whole CTA: nothing of this row's length is in its range
  const uint32_t tiles = last - first;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == kMathThreads) InitRing(s, kMathThreads);
  __syncthreads();
  if (warp == kMathThreads / 32) {
    ProduceTiles(s, q + uint64_t(row) * kHeads * kHeadDim, true, kv, num_pages,
                 physical + uint64_t(row) * c + first * kBlocksPerTile, tiles, 0, 1, lane);
    return;
  }
  const Scorer<kHeads> scorer(weights + uint64_t(row) * kHeads, warp, lane);
  reinterpret_cast<Barrier*>(&s.q_full)->wait(0);
  float* out = logits + uint64_t(row) * row_cols;
  for (uint32_t i = 0; i < tiles; ++i) {
    float v0, v1;
    scorer.Score(s, i % kStages, (i / kStages) & 1, lane, v0, v1);
    if (lane % 4 == 0) {  // the quad holds one value
      float* tile = out + (first + i) * kTile + scorer.sub_warp;
      tile[scorer.v0_at] = v0;
      tile[scorer.v1_at] = v1;
    }
  }
#endif
}

PerDevice g_num_sms;  // recorded by PrepareSparseLogitsSm90

template <uint32_t kHeads>
cudaError_t Launch(cudaStream_t stream, const Sm90SparseLogits& c, uint32_t num_sms) {
  // Enough CTAs to fill every SM kCtasPerSm times when the rows are full, at least two tiles a
  // CTA (each CTA loads its row's q once).
  const uint32_t row_tiles = uint32_t(c.c) / kBlocksPerTile;
  const uint64_t slots = uint64_t(num_sms) * kCtasPerSm;
  const uint32_t per = std::min<uint32_t>(
      row_tiles,
      std::max<uint32_t>(2, uint32_t((uint64_t(c.rows) * row_tiles + slots - 1) / slots)));
  const dim3 grid(CeilDiv(row_tiles, per), uint32_t(c.rows));
  return LaunchKernel(SparseLogitsKernel<kHeads>, grid, dim3(kThreads), SmemBytes<kHeads>(), stream,
                      0, static_cast<const uint8_t*>(c.q), c.kv, c.num_pages, c.weights, c.physical,
                      c.valid_lens, c.logits, uint32_t(c.c), per);
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
  if (rows > kSm90SparseMaxRows || c * kBlock > (int64_t(1) << 30) ||
      kd[0] > (int64_t(1) << 31) - 1) {
    return InvalidArgument(op, "at most " + std::to_string(kSm90SparseMaxRows) +
                                   " rows, 2^30 columns and 2^31 - 1 pages");
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
  const auto launch = c.heads == 32 ? Launch<32> : Launch<64>;
  return CudaStatus(op, launch(stream, c, uint32_t(num_sms)));
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
