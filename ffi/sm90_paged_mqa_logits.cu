// dsv41_sm90_paged_mqa_logits <-> PagedMqaLogitsSm90FFI <-> dsv41_jax.paged_mqa_logits("ffi")
//
// dsv41_sm90_paged_mqa_schedule <-> PagedMqaScheduleSm90FFI <-> the fused layers' schedule
//
// DeepGEMM's SM90 FP8 paged MQA logits (dense), instantiated ahead of time from the installed
// sgl-deep-gemm headers: the schedule-metadata kernel, then the main kernel, on XLA's stream.
// The launch recipe (threads, split, TMA boxes, shared memory) follows DeepGEMM's own launcher.
// The schedule depends only on the lengths, so the fused layers (sm90_indexer_layers.cu) take
// one computed per step. Positions on a page id outside the cache read the scales' TMA
// out-of-bounds fill, NaN: every logit there is NaN (the kernel multiplies its head sum by the
// scale), as the contract asks, with no pass of its own.
#include <deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh>
#include <deep_gemm/scheduler/sm90_paged_mqa_logits.cuh>

#include "common.h"
#include "sm90_paged_mqa_logits.h"
#include "tma.h"

namespace dsv41 {
namespace {

constexpr uint32_t kHeadDim = 128;
constexpr uint32_t kPageSize = 64;  // BLOCK_KV: one KV block is one page
constexpr uint32_t kNumMathWarpGroups = 4;
constexpr uint32_t kSplitKV = kPageSize * kNumMathWarpGroups;  // 256 positions per task
constexpr uint32_t kNumTMAThreads = 128, kNumMathThreads = 128 * kNumMathWarpGroups;
constexpr uint32_t kNumQStages = 3, kNumKVStages = 3;

constexpr uint32_t Align(uint32_t x, uint32_t a) { return (x + a - 1) / a * a; }

// Mirrors the kernel's own shared-memory plan (sm90_fp8_paged_mqa_logits.cuh).
constexpr uint32_t SmemBytes(uint32_t next_n, uint32_t heads) {
  const uint32_t swizzle = kHeadDim * 8;
  const uint32_t q_pipe =
      kNumQStages * (next_n * heads * kHeadDim + Align(next_n * heads * 4, swizzle)) +
      Align(kNumQStages * 16, swizzle);
  const uint32_t kv_pipe = kNumKVStages * (kPageSize * kHeadDim + Align(kPageSize * 4, swizzle)) +
                           Align(kNumKVStages * 16, swizzle);
  return q_pipe + kNumMathWarpGroups * kv_pipe;
}

template <uint32_t kNextN, uint32_t kNumHeads>
cudaError_t LaunchMain(cudaStream_t stream, uint32_t num_sms, uint32_t batch,
                       uint32_t logits_stride, uint32_t block_table_stride, const int32_t* lens,
                       float* logits, const int32_t* block_table, const int32_t* schedule,
                       const CUtensorMap& q, const CUtensorMap& kv, const CUtensorMap& kv_scales,
                       const CUtensorMap& w) {
  auto kernel = &deep_gemm::sm90_fp8_paged_mqa_logits<kNextN, kNumHeads, kHeadDim, kPageSize, false,
                                                      false, kNumQStages, kNumKVStages, kSplitKV,
                                                      kNumTMAThreads, kNumMathThreads, float>;
  constexpr uint32_t smem = SmemBytes(kNextN, kNumHeads);
  kernel<<<num_sms, kNumTMAThreads + kNumMathThreads, smem, stream>>>(
      batch, logits_stride, block_table_stride, reinterpret_cast<const uint32_t*>(lens), logits,
      reinterpret_cast<const uint32_t*>(block_table), nullptr,
      reinterpret_cast<const uint32_t*>(schedule), q, kv, kv_scales, w);
  return cudaGetLastError();
}

template <uint32_t kNextN, uint32_t kNumHeads>
cudaError_t SetSmemAttribute() {
  auto kernel = &deep_gemm::sm90_fp8_paged_mqa_logits<kNextN, kNumHeads, kHeadDim, kPageSize, false,
                                                      false, kNumQStages, kNumKVStages, kSplitKV,
                                                      kNumTMAThreads, kNumMathThreads, float>;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              SmemBytes(kNextN, kNumHeads));
}

PerDevice g_num_sms;  // the SM count, recorded by the Prepare function below

// The SM count the schedule and the grid are instantiated for: the device's on the Hopper parts
// (132, 114, 78), else the largest below it (78 under it). The schedule splits the work into that
// many segments, one a CTA, so any count is correct; a count between two runs a little idle.
uint32_t ScheduledSms(int num_sms) { return num_sms >= 132 ? 132 : num_sms >= 114 ? 114 : 78; }

template <uint32_t kAlignedBatch, uint32_t kNumSMs>
void LaunchSchedule(cudaStream_t stream, uint32_t batch, uint32_t next_n, const int32_t* lens,
                    int32_t* schedule) {
  deep_gemm::sched::sm90_paged_mqa_logits_metadata<kAlignedBatch, kSplitKV, kNumSMs, false>
      <<<1, 32, kAlignedBatch * sizeof(uint32_t), stream>>>(
          batch, next_n, false, reinterpret_cast<const uint32_t*>(lens), nullptr,
          reinterpret_cast<uint32_t*>(schedule));
}

template <uint32_t kNumSMs>
bool ScheduleForSMs(cudaStream_t stream, uint32_t batch, uint32_t next_n, const int32_t* lens,
                    int32_t* schedule) {
  if (batch <= 32)
    LaunchSchedule<32, kNumSMs>(stream, batch, next_n, lens, schedule);
  else if (batch <= 64)
    LaunchSchedule<64, kNumSMs>(stream, batch, next_n, lens, schedule);
  else if (batch <= 128)
    LaunchSchedule<128, kNumSMs>(stream, batch, next_n, lens, schedule);
  else if (batch <= 256)
    LaunchSchedule<256, kNumSMs>(stream, batch, next_n, lens, schedule);
  else if (batch <= 512)
    LaunchSchedule<512, kNumSMs>(stream, batch, next_n, lens, schedule);
  else if (batch <= kSm90MaxBatch)
    LaunchSchedule<kSm90MaxBatch, kNumSMs>(stream, batch, next_n, lens, schedule);
  else
    return false;
  return true;
}

}  // namespace

ffi::Error LaunchSm90Schedule(const char* op, cudaStream_t stream, int64_t batch, int64_t next_n,
                              const int32_t* lens, int32_t* schedule) {
  // No set-up calls here: they are illegal while XLA captures the stream into a CUDA graph.
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0) {
    return ffi::Error::Internal(std::string(op) + ": device not prepared (dsv41_jax._ext.prepare)");
  }
  bool scheduled = false;
  switch (ScheduledSms(num_sms)) {
    case 132:
      scheduled = ScheduleForSMs<132>(stream, batch, next_n, lens, schedule);
      break;
    case 114:
      scheduled = ScheduleForSMs<114>(stream, batch, next_n, lens, schedule);
      break;
    default:
      scheduled = ScheduleForSMs<78>(stream, batch, next_n, lens, schedule);
      break;
  }
  if (!scheduled)
    return InvalidArgument(op, "batch above " + std::to_string(kSm90MaxBatch) + " requests");
  return LastCudaError(op);
}

ffi::ErrorOr<Sm90PagedLogits> Sm90PagedLogitsOf(const char* op, const ffi::AnyBuffer& q,
                                                const Buffer<ffi::F32>& weights,
                                                const Buffer<ffi::U8>& kv,
                                                const Buffer<ffi::S32>& block_table, float* logits,
                                                int64_t logits_rows, int64_t cols) {
  if (q.element_type() != ffi::F8E4M3FN) return InvalidArgument(op, "q must be float8_e4m3fn");
  const auto qd = q.dimensions(), kd = kv.dimensions(), bd = block_table.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || bd.size() != 2) {
    return InvalidArgument(op,
                           "expected q [b, n, h, d], kv [pages, P, 1, d + 4], "
                           "block_table [b, pages]");
  }
  const int64_t batch = qd[0], next_n = qd[1], heads = qd[2];
  if (qd[3] != kHeadDim || kd[1] != kPageSize || kd[2] != 1 || kd[3] != kHeadDim + 4) {
    return InvalidArgument(op, "needs head_dim 128 and an fp8 cache of 64-token pages");
  }
  if ((heads != 32 && heads != 64) || (next_n != 1 && next_n != 2)) {
    return InvalidArgument(op, "needs 32 or 64 heads and next_n 1 or 2");
  }
  if (bd[0] != batch || logits_rows != batch * next_n || cols % kSplitKV != 0 ||
      cols < bd[1] * kPageSize || weights.element_count() != batch * next_n * heads) {
    return InvalidArgument(op,
                           "inconsistent shapes (logits columns must cover the page table "
                           "and be a multiple of 256)");
  }
  if (batch > kSm90MaxBatch)
    return InvalidArgument(op, "batch above " + std::to_string(kSm90MaxBatch) + " requests");
  if (batch > 0 && (kd[0] == 0 || bd[1] == 0))
    return InvalidArgument(op, "empty cache or page table");
  return Sm90PagedLogits{q.untyped_data(),
                         weights.typed_data(),
                         kv.typed_data(),
                         block_table.typed_data(),
                         logits,
                         batch,
                         next_n,
                         heads,
                         kd[0],
                         bd[1],
                         cols};
}

ffi::Error LaunchSm90PagedLogits(const char* op, cudaStream_t stream, const Sm90PagedLogits& c,
                                 const int32_t* lens, const int32_t* schedule) {
  if (c.batch == 0) return ffi::Error::Success();
  const int num_sms = g_num_sms.Current();
  if (num_sms == 0) {
    return ffi::Error::Internal(std::string(op) + ": device not prepared (dsv41_jax._ext.prepare)");
  }
  // TMA maps (DeepGEMM's): q [b·n·h, d] 128B-swizzled; kv values [pages, P, d] inside each
  // page; kv scales [pages, P] right after the page's values (out of bounds: NaN); weights
  // [b·n, h].
  const uint8_t* kv_base = c.kv;
  const uint64_t page_bytes = kPageSize * (kHeadDim + 4);
  CUtensorMap q_map, kv_map, sc_map, w_map;
  const bool ok =
      EncodeTiled(&q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, c.q,
                  {kHeadDim, uint64_t(c.batch * c.next_n * c.heads)}, {kHeadDim},
                  {kHeadDim, uint32_t(c.next_n * c.heads)}, CU_TENSOR_MAP_SWIZZLE_128B) &&
      EncodeTiled(&kv_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, kv_base,
                  {kHeadDim, kPageSize, uint64_t(c.num_pages)}, {kHeadDim, page_bytes},
                  {kHeadDim, kPageSize, 1}, CU_TENSOR_MAP_SWIZZLE_128B) &&
      EncodeTiled(&sc_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kv_base + kPageSize * kHeadDim,
                  {kPageSize, uint64_t(c.num_pages)}, {page_bytes}, {kPageSize, 1},
                  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) &&
      EncodeTiled(&w_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, c.weights,
                  {uint64_t(c.heads), uint64_t(c.batch * c.next_n)}, {uint64_t(c.heads * 4)},
                  {uint32_t(c.heads), uint32_t(c.next_n)}, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (!ok) return ffi::Error::Internal(std::string(op) + ": cuTensorMapEncodeTiled failed");
  using MainFn = decltype(&LaunchMain<1, 32>);
  const MainFn main = c.next_n == 1 ? (c.heads == 32 ? LaunchMain<1, 32> : LaunchMain<1, 64>)
                                    : (c.heads == 32 ? LaunchMain<2, 32> : LaunchMain<2, 64>);
  return CudaStatus(op, main(stream, ScheduledSms(num_sms), c.batch, c.cols, c.max_pages, lens,
                             c.logits, c.block_table, schedule, q_map, kv_map, sc_map, w_map));
}

namespace {

ffi::Error PagedMqaLogitsSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                              Buffer<ffi::U8> kv, Buffer<ffi::S32> lens,
                              Buffer<ffi::S32> block_table, Result<ffi::F32> logits,
                              Result<ffi::S32> schedule) {
  constexpr const char* kOp = "dsv41_sm90_paged_mqa_logits";
  const auto ld = logits->dimensions();
  if (ld.size() != 2) return InvalidArgument(kOp, "expected logits [b * n, cols]");
  auto call =
      Sm90PagedLogitsOf(kOp, q, weights, kv, block_table, logits->typed_data(), ld[0], ld[1]);
  if (call.has_error()) return call.error();
  if (lens.element_count() != call->batch || schedule->element_count() != 2 * kSm90ScheduleRows) {
    return InvalidArgument(kOp, "inconsistent shapes (lens [b], schedule [257, 2])");
  }
  if (call->batch == 0) return ffi::Error::Success();
  if (auto e = LaunchSm90Schedule(kOp, stream, call->batch, call->next_n, lens.typed_data(),
                                  schedule->typed_data());
      e.failure()) {
    return e;
  }
  return LaunchSm90PagedLogits(kOp, stream, *call, lens.typed_data(), schedule->typed_data());
}

ffi::Error PagedMqaScheduleSm90(cudaStream_t stream, Buffer<ffi::S32> lens,
                                Result<ffi::S32> schedule, int32_t next_n) {
  constexpr const char* kOp = "dsv41_sm90_paged_mqa_schedule";
  if (schedule->element_count() != 2 * kSm90ScheduleRows || (next_n != 1 && next_n != 2)) {
    return InvalidArgument(kOp, "expected lens [b], schedule [257, 2], next_n 1 or 2");
  }
  if (lens.element_count() == 0) return ffi::Error::Success();
  return LaunchSm90Schedule(kOp, stream, lens.element_count(), next_n, lens.typed_data(),
                            schedule->typed_data());
}

}  // namespace

cudaError_t PreparePagedMqaLogitsSm90() {
  g_num_sms.Record(CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount));
  cudaError_t err = g_num_sms.Current() ? cudaSuccess : cudaErrorInvalidDevice;
  for (auto set : {SetSmemAttribute<1, 32>, SetSmemAttribute<1, 64>, SetSmemAttribute<2, 32>,
                   SetSmemAttribute<2, 64>}) {
    if (err == cudaSuccess) err = set();
  }
  return err;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PagedMqaLogitsSm90FFI, PagedMqaLogitsSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()   // context_lens [batch], clamped
                                  .Arg<Buffer<ffi::S32>>()   // block_table [batch, max_pages]
                                  .Ret<Buffer<ffi::F32>>()   // logits [batch * next_n, cols]
                                  .Ret<Buffer<ffi::S32>>(),  // schedule workspace [257, 2]
                              kCmdBuffer);

XLA_FFI_DEFINE_HANDLER_SYMBOL(PagedMqaScheduleSm90FFI, PagedMqaScheduleSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::S32>>()  // lens [batch], clamped
                                  .Ret<Buffer<ffi::S32>>()  // schedule [257, 2]
                                  .Attr<int32_t>("next_n"),
                              kCmdBuffer);

}  // namespace dsv41
