// dsv41_sm100_mqa_logits <-> MqaLogitsSm100FFI <-> dsv41_jax.mqa_logits("ffi")
//
// DeepGEMM's SM100 ragged (prefill) MQA logits over packed MXFP4 keys (the unified contiguous
// `sm100_mqa_logits`, static schedule), bf16 logits in the relative layout, instantiated ahead
// of time for sm_100a (its status: "sm100 prefill logits" in docs/status.md); on any other GPU
// the handler refuses (and the Python wrapper declines first). The ranges are clamped
// and the rest of each row set to -inf first (smxx_ragged_rows), as for the SM90 kernel. The
// launch recipe follows DeepGEMM's own launcher for this kernel version.
#include <deep_gemm/impls/sm100_mqa_logits.cuh>

#include "common.h"
#include "sm100_paged_sparse_mqa_logits.h"
#include "smxx_launch.cuh"
#include "smxx_ragged_rows.cuh"
#include "tma.h"

namespace dsv41 {
namespace {

constexpr uint32_t kHeads = 32, kHeadDim = 128;
constexpr uint32_t kBlockQ = 128 / kHeads, kUmmaN = kBlockQ * kHeads;
constexpr uint32_t kSplitKV = kSm100LogitsSplit;
constexpr uint32_t kKVTokensPerTMA = kSplitKV % 256 == 0 ? 256 : 128;
constexpr uint32_t kQStages = 2, kKVStages = 8, kTmemStages = 3;
constexpr uint32_t kSpecializedThreads = 128, kMathThreads = (kSplitKV / 128) * 128;
static_assert(kBlockQ <= kMqaRowPadding, "ranges workspace padding");

using Storage =
    deep_gemm::layout::MQALogitsSharedStorage<kHeads, kHeadDim, kBlockQ, kSplitKV, kUmmaN, kQStages,
                                              kKVStages, kTmemStages, cutlass::float_e2m1_t>;

constexpr auto Kernel() {
  return &deep_gemm::sm100_mqa_logits<kHeads, kHeadDim, false, kBlockQ, kSplitKV, kUmmaN, kQStages,
                                      kKVStages, kTmemStages, kSm100SMs, kSpecializedThreads,
                                      kMathThreads, cutlass::float_e2m1_t>;
}

PerDevice g_prepared;  // 1 once PrepareMqaLogitsSm100 set the kernel attributes

ffi::Error MqaLogitsSm100(cudaStream_t stream, Buffer<ffi::U8> q, Buffer<ffi::S32> sf_q,
                          Buffer<ffi::BF16> weights, Buffer<ffi::U8> kv, Buffer<ffi::S32> sf_kv,
                          Buffer<ffi::S32> starts, Buffer<ffi::S32> ends, Result<ffi::BF16> logits,
                          Result<ffi::S32> ranges) {
  constexpr const char* kOp = "dsv41_sm100_mqa_logits";
  if (auto e = RequireSm100(g_prepared, kOp); e.failure()) return e;
  const auto qd = q.dimensions(), kd = kv.dimensions(), ld = logits->dimensions();
  if (qd.size() != 3 || kd.size() != 2 || ld.size() != 2) {
    return InvalidArgument(kOp,
                           "expected q [rows, 32, 64], kv [tokens, 64], logits [rows, tokens]");
  }
  const int64_t rows = qd[0], tokens = kd[0];
  const int64_t rows_padded = (rows + kBlockQ - 1) / kBlockQ * kBlockQ;
  if (qd[1] != kHeads || qd[2] != kHeadDim / 2 || kd[1] != kHeadDim / 2 ||
      sf_q.element_count() != rows * kHeads || weights.element_count() != rows * kHeads ||
      sf_kv.element_count() != tokens || starts.element_count() != rows ||
      ends.element_count() != rows || ld[0] != rows || ld[1] != tokens ||
      ranges->element_count() < 2 * rows_padded) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (tokens >= (int64_t(1) << 31)) return InvalidArgument(kOp, "more than 2^31 - 1 keys");
  if (rows == 0 || tokens == 0) return ffi::Error::Success();

  // TMA maps (DeepGEMM's): q [rows·h, d] and kv [tokens, d] packed e2m1, 64B-swizzled; sf_q
  // [rows, h] and sf_kv [1, tokens] (4 ue8m0 each; the sf_kv row stride is never stepped);
  // weights [rows, h] bf16. Boxes past the ends read TMA's zero fill, never stored.
  CUtensorMap q_map, sf_q_map, kv_map, sf_kv_map, w_map;
  static_assert(kHeadDim == 128 && kUmmaN == kBlockQ * kHeads, "EncodeMxfp4QueryMaps' shapes");
  const bool ok =
      EncodeMxfp4QueryMaps(&q_map, &sf_q_map, &w_map, q.untyped_data(), sf_q.untyped_data(),
                           weights.untyped_data(), uint64_t(rows), kHeads, kBlockQ) &&
      EncodeTiled(&kv_map, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, kv.untyped_data(),
                  {kHeadDim, uint64_t(tokens)}, {kHeadDim / 2}, {kHeadDim, kKVTokensPerTMA},
                  CU_TENSOR_MAP_SWIZZLE_64B) &&
      EncodeTiled(&sf_kv_map, CU_TENSOR_MAP_DATA_TYPE_INT32, sf_kv.untyped_data(),
                  {uint64_t(tokens), 1}, {(uint64_t(tokens) * 4 + 15) / 16 * 16},
                  {kKVTokensPerTMA, 1}, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (!ok) return ffi::Error::Internal(std::string(kOp) + ": cuTensorMapEncodeTiled failed");

  auto* out = reinterpret_cast<__nv_bfloat16*>(logits->untyped_data());
  auto* range_data = reinterpret_cast<uint32_t*>(ranges->typed_data());
  if (auto e = CudaStatus(
          kOp, LaunchPrepareRaggedRows(stream, out, tokens, starts.typed_data(), ends.typed_data(),
                                       rows, rows_padded, range_data));
      e.failure()) {
    return e;
  }
  Kernel()<<<kSm100SMs, kSpecializedThreads + kMathThreads, sizeof(Storage), stream>>>(
      uint32_t(rows_padded), uint32_t(tokens), uint32_t(tokens), range_data,
      range_data + rows_padded, nullptr, reinterpret_cast<nv_bfloat16*>(out), q_map, sf_q_map,
      kv_map, sf_kv_map, w_map);
  return LastCudaError(kOp);
}

}  // namespace

cudaError_t PrepareMqaLogitsSm100() {
  return PrepareOnSm100(g_prepared, [] { return SetMaxDynamicSmem(sizeof(Storage), Kernel()); });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MqaLogitsSm100FFI, MqaLogitsSm100,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::U8>>()    // q [rows, 32, 64] packed e2m1
                                  .Arg<Buffer<ffi::S32>>()   // sf_q [rows, 32] 4 x ue8m0
                                  .Arg<Buffer<ffi::BF16>>()  // weights [rows, 32]
                                  .Arg<Buffer<ffi::U8>>()    // kv [tokens, 64] packed e2m1
                                  .Arg<Buffer<ffi::S32>>()   // sf_kv [tokens] 4 x ue8m0
                                  .Arg<Buffer<ffi::S32>>()   // starts [rows]
                                  .Arg<Buffer<ffi::S32>>()   // ends [rows]
                                  .Ret<Buffer<ffi::BF16>>()  // logits [rows, tokens], relative
                                  .Ret<Buffer<ffi::S32>>(),  // ranges workspace [2, >= rows_padded]
                              kCmdBuffer);

}  // namespace dsv41
