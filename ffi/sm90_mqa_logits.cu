// dsv41_sm90_mqa_logits <-> MqaLogitsSm90FFI <-> dsv41_jax.mqa_logits("ffi")
//
// DeepGEMM's SM90 FP8 ragged (prefill) MQA logits, instantiated ahead of time from the installed
// sgl-deep-gemm headers. Row i scores packed keys [ks[i], ke[i]) and the kernel writes them at
// columns [0, ke[i] - ks[i]) of the row (the "relative" layout); a small kernel first clamps the
// ranges into a workspace and writes -inf to the rest of each row, so every element is defined.
// The launch recipe (block sizes, stages, threads, TMA boxes, shared memory) follows DeepGEMM's
// own launcher for this kernel.
#include <deep_gemm/impls/sm90_fp8_mqa_logits.cuh>

#include "common.h"
#include "smxx_launch.cuh"
#include "smxx_ragged_rows.cuh"
#include "tma.h"

namespace dsv41 {
namespace {

constexpr uint32_t kHeadDim = 128;
constexpr uint32_t kBlockQH = 128;  // query rows x heads per block (one WGMMA N of 128)
constexpr uint32_t kBlockKV = 256;  // keys per block: kNumMathThreads / 2
constexpr uint32_t kNumQStages = 3, kNumKVStages = 3;
constexpr uint32_t kNumTMAThreads = 128, kNumMathThreads = 512;

constexpr uint32_t BlockQ(uint32_t heads) { return kBlockQH / heads; }
static_assert(BlockQ(32) == kMqaRowPadding, "ranges workspace padding");

// Mirrors the kernel's shared-memory plan: Q, KV, weight and KV-scale stages, then 8-byte barriers.
constexpr uint32_t SmemBytes(uint32_t heads) {
  return kNumQStages * (BlockQ(heads) * heads * kHeadDim + BlockQ(heads) * heads * 4) +
         kNumKVStages * (kBlockKV * kHeadDim + kBlockKV * 4) +
         (2 * kNumQStages + 2 * kNumKVStages) * 8;
}

template <uint32_t kNumHeads, uint32_t kNumSMs>
constexpr auto Kernel() {
  return &deep_gemm::sm90_fp8_mqa_logits<kNumHeads, kHeadDim, BlockQ(kNumHeads), kBlockKV,
                                         kNumQStages, kNumKVStages, kNumSMs, kNumTMAThreads,
                                         kNumMathThreads, float>;
}

template <uint32_t kNumHeads, uint32_t kNumSMs>
cudaError_t Launch(cudaStream_t stream, uint32_t rows_padded, uint32_t cols, const uint32_t* ranges,
                   float* logits, const CUtensorMap& q, const CUtensorMap& kv,
                   const CUtensorMap& scales, const CUtensorMap& w) {
  Kernel<kNumHeads,
         kNumSMs>()<<<kNumSMs, kNumTMAThreads + kNumMathThreads, SmemBytes(kNumHeads), stream>>>(
      rows_padded, cols, cols, const_cast<uint32_t*>(ranges),
      const_cast<uint32_t*>(ranges) + rows_padded, logits, q, kv, scales, w);
  return cudaGetLastError();
}

// The scheduler strides over query blocks by kNumSMs (a template argument): one instantiation per
// SM count of the Hopper parts (132, 114, 78), the grid equal to it. Correctness does not depend
// on residency, so a part with another count uses the largest instantiation that fits (or 78).
template <uint32_t kNumHeads>
cudaError_t LaunchForSMs(int num_sms, cudaStream_t stream, uint32_t rows_padded, uint32_t cols,
                         const uint32_t* ranges, float* logits, const CUtensorMap& q,
                         const CUtensorMap& kv, const CUtensorMap& scales, const CUtensorMap& w) {
  if (num_sms >= 132)
    return Launch<kNumHeads, 132>(stream, rows_padded, cols, ranges, logits, q, kv, scales, w);
  if (num_sms >= 114)
    return Launch<kNumHeads, 114>(stream, rows_padded, cols, ranges, logits, q, kv, scales, w);
  return Launch<kNumHeads, 78>(stream, rows_padded, cols, ranges, logits, q, kv, scales, w);
}

template <uint32_t kNumHeads>
cudaError_t SetSmemAttributes() {
  return SetMaxDynamicSmem(size_t(SmemBytes(kNumHeads)), Kernel<kNumHeads, 132>(),
                           Kernel<kNumHeads, 114>(), Kernel<kNumHeads, 78>());
}

PerDevice g_num_sms;  // the SM count, recorded by the Prepare function below

ffi::Error MqaLogitsSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                         ffi::AnyBuffer kv, Buffer<ffi::F32> kv_scales, Buffer<ffi::S32> starts,
                         Buffer<ffi::S32> ends, Result<ffi::F32> logits, Result<ffi::S32> ranges) {
  constexpr const char* kOp = "dsv41_sm90_mqa_logits";
  if (q.element_type() != ffi::F8E4M3FN || kv.element_type() != ffi::F8E4M3FN) {
    return InvalidArgument(kOp, "q and kv must be float8_e4m3fn");
  }
  const auto qd = q.dimensions(), kd = kv.dimensions(), ld = logits->dimensions();
  if (qd.size() != 4 || kd.size() != 2 || ld.size() != 2) {
    return InvalidArgument(kOp,
                           "expected q [rows, 1, h, 128], kv [tokens, 128], logits [rows, tokens]");
  }
  const int64_t rows = qd[0], heads = qd[2], tokens = kd[0];
  if (qd[1] != 1 || qd[3] != kHeadDim || kd[1] != kHeadDim) {
    return InvalidArgument(kOp, "needs one query row per token and head_dim 128");
  }
  if (heads != 32 && heads != 64) return InvalidArgument(kOp, "needs 32 or 64 heads");
  const int64_t block_q = BlockQ(uint32_t(heads));
  const int64_t rows_padded = (rows + block_q - 1) / block_q * block_q;
  if (ld[0] != rows || ld[1] != tokens || weights.element_count() != rows * heads ||
      kv_scales.element_count() != tokens || starts.element_count() != rows ||
      ends.element_count() != rows || ranges->element_count() < 2 * rows_padded) {
    return InvalidArgument(kOp,
                           "inconsistent shapes (ranges workspace: 2 x rows rounded up to "
                           "the query block)");
  }
  if (tokens >= (int64_t(1) << 31)) return InvalidArgument(kOp, "more than 2^31 - 1 keys");
  if (rows == 0 || tokens == 0) return ffi::Error::Success();

  // No set-up calls here: they are illegal while XLA captures the stream into a CUDA graph.
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0) {
    return ffi::Error::Internal(std::string(kOp) +
                                ": device not prepared (dsv41_jax._ext.prepare)");
  }

  // TMA maps (DeepGEMM's): q [rows·h, d] and kv [tokens, d] 128B-swizzled, kv scales [1, tokens]
  // (the row stride is never stepped; rounded up to the 16 bytes TMA wants), weights [rows, h].
  // Boxes past the ends read TMA's zero fill; those columns are never stored.
  CUtensorMap q_map, kv_map, sc_map, w_map;
  const bool ok = EncodeTiled(&q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, q.untyped_data(),
                              {kHeadDim, uint64_t(rows * heads)}, {kHeadDim}, {kHeadDim, kBlockQH},
                              CU_TENSOR_MAP_SWIZZLE_128B) &&
                  EncodeTiled(&kv_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, kv.untyped_data(),
                              {kHeadDim, uint64_t(tokens)}, {kHeadDim}, {kHeadDim, kBlockKV},
                              CU_TENSOR_MAP_SWIZZLE_128B) &&
                  EncodeTiled(&sc_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kv_scales.typed_data(),
                              {uint64_t(tokens), 1}, {(uint64_t(tokens) * 4 + 15) / 16 * 16},
                              {kBlockKV, 1}, CU_TENSOR_MAP_SWIZZLE_NONE) &&
                  EncodeTiled(&w_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, weights.typed_data(),
                              {uint64_t(heads), uint64_t(rows)}, {uint64_t(heads * 4)},
                              {uint32_t(heads), uint32_t(block_q)}, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (!ok) return ffi::Error::Internal(std::string(kOp) + ": cuTensorMapEncodeTiled failed");

  auto* range_data = reinterpret_cast<uint32_t*>(ranges->typed_data());
  if (auto e = CudaStatus(
          kOp, LaunchPrepareRaggedRows(stream, logits->typed_data(), tokens, starts.typed_data(),
                                       ends.typed_data(), rows, rows_padded, range_data));
      e.failure()) {
    return e;
  }

  const auto launch = heads == 32 ? LaunchForSMs<32> : LaunchForSMs<64>;
  const cudaError_t err = launch(num_sms, stream, uint32_t(rows_padded), uint32_t(tokens),
                                 range_data, logits->typed_data(), q_map, kv_map, sc_map, w_map);
  if (err != cudaSuccess)
    return ffi::Error::Internal(std::string(kOp) + ": " + cudaGetErrorString(err));
  return ffi::Error::Success();
}

}  // namespace

cudaError_t PrepareMqaLogitsSm90() {
  g_num_sms.Record(CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount));
  cudaError_t err = g_num_sms.Current() ? cudaSuccess : cudaErrorInvalidDevice;
  if (err == cudaSuccess) err = SetSmemAttributes<32>();
  if (err == cudaSuccess) err = SetSmemAttributes<64>();
  return err;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MqaLogitsSm90FFI, MqaLogitsSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [rows, 1, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [rows, 1, H]
                                  .Arg<ffi::AnyBuffer>()     // kv [tokens, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // kv scales [tokens]
                                  .Arg<Buffer<ffi::S32>>()   // starts [rows]
                                  .Arg<Buffer<ffi::S32>>()   // ends [rows]
                                  .Ret<Buffer<ffi::F32>>()   // logits [rows, tokens], relative
                                  .Ret<Buffer<ffi::S32>>(),  // ranges workspace [2, >= rows_padded]
                              kCmdBuffer);

}  // namespace dsv41
