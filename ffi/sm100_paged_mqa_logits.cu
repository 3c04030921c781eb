// dsv41_sm100_paged_mqa_logits <-> PagedMqaLogitsSm100FFI <-> dsv41_jax.paged_mqa_logits("ffi")
//
// DeepGEMM's SM100 paged MQA logits (dense, MXFP4 cache, bf16 logits) with its schedule-metadata
// kernel, instantiated ahead of time for sm_100a (its status: "sm100 paged logits" in
// docs/status.md); on any other GPU the handler refuses (and the Python wrapper declines first).
// The launch recipe (split, stages, threads, TMA maps, shared memory) follows DeepGEMM's own
// launcher for this kernel version (the unified MXFP4/MXFP8 `sm100_paged_mqa_logits`).
#include <deep_gemm/impls/sm100_mqa_logits.cuh>
#include <deep_gemm/scheduler/sm100_paged_mqa_logits.cuh>

#include <utility>

#include "common.h"
#include "sm100_paged_sparse_mqa_logits.h"
#include "smxx_launch.cuh"
#include "tma.h"

namespace dsv41 {
namespace {

constexpr uint32_t kHeads = 32, kHeadDim = 128;
constexpr uint32_t kBlockQ = 128 / kHeads;  // (row, head) pairs per UMMA N of 128
constexpr uint32_t kUmmaN = kBlockQ * kHeads;
constexpr uint32_t kSplitKV = kSm100LogitsSplit;  // positions per split: 3 math warpgroups
constexpr uint32_t kQStages = 2, kKVStages = 8, kTmemStages = 3;  // FP4: deeper, half-size stages
constexpr uint32_t kSplitsPerChunk = 8;
constexpr uint32_t kSpecializedThreads = 128, kMathThreads = (kSplitKV / 128) * 128;
constexpr uint32_t kTokenBytes = kHeadDim / 2 + 4;  // packed e2m1 values + 4 ue8m0 scales

using Storage =
    deep_gemm::layout::MQALogitsSharedStorage<kHeads, kHeadDim, kBlockQ, kSplitKV, kUmmaN, kQStages,
                                              kKVStages, kTmemStages, cutlass::float_e2m1_t>;

template <uint32_t kPage>
constexpr auto Kernel() {
  return &deep_gemm::sm100_paged_mqa_logits<
      kHeads, kHeadDim, kPage, kBlockQ, kUmmaN, kQStages, kKVStages, kTmemStages, kSplitKV,
      kSplitsPerChunk, kSpecializedThreads, kMathThreads, cutlass::float_e2m1_t>;
}

// The metadata kernel keeps two words per query row in shared memory; its block size grows with
// the rows, as DeepGEMM's launcher chooses it.
template <uint32_t kThreads>
constexpr auto MetadataKernel() {
  return &deep_gemm::sched::sm100_paged_mqa_logits_metadata<kSplitKV, kSm100SMs, kBlockQ, kThreads>;
}

constexpr int MetadataSmem(int64_t rows, uint32_t threads) {
  return int((2 * rows + threads / 32 + 1) * sizeof(uint32_t));
}

void LaunchMetadata(cudaStream_t stream, int64_t rows, const int32_t* lens, const int32_t* indices,
                    int32_t* schedule) {
  const auto* l = reinterpret_cast<const uint32_t*>(lens);
  const auto* i = reinterpret_cast<const uint32_t*>(indices);
  auto* s = reinterpret_cast<uint32_t*>(schedule);
  if (rows <= 512) {
    MetadataKernel<256>()<<<1, 256, MetadataSmem(rows, 256), stream>>>(uint32_t(rows), l, i, s);
  } else if (rows <= 2048) {
    MetadataKernel<512>()<<<1, 512, MetadataSmem(rows, 512), stream>>>(uint32_t(rows), l, i, s);
  } else {
    MetadataKernel<1024>()<<<1, 1024, MetadataSmem(rows, 1024), stream>>>(uint32_t(rows), l, i, s);
  }
}

PerDevice g_prepared;  // 1 once PreparePagedMqaLogitsSm100 set the kernel attributes

ffi::Error PagedMqaLogitsSm100(cudaStream_t stream, Buffer<ffi::U8> q, Buffer<ffi::S32> sf_q,
                               Buffer<ffi::BF16> weights, Buffer<ffi::U8> cache,
                               Buffer<ffi::S32> row_lens, Buffer<ffi::S32> row_block_table,
                               Buffer<ffi::S32> request_ids, Result<ffi::BF16> logits,
                               Result<ffi::S32> schedule) {
  constexpr const char* kOp = "dsv41_sm100_paged_mqa_logits";
  if (auto e = RequireSm100(g_prepared, kOp); e.failure()) return e;
  const auto qd = q.dimensions(), cd = cache.dimensions(), bd = row_block_table.dimensions();
  const auto ld = logits->dimensions();
  if (qd.size() != 3 || cd.size() != 4 || bd.size() != 2 || ld.size() != 2) {
    return InvalidArgument(kOp,
                           "expected q [rows, 32, 64], cache [pages, P, 1, 68], "
                           "row_block_table [rows, pages], logits [rows, cols]");
  }
  const int64_t rows = qd[0], page = cd[1];
  if (qd[1] != kHeads || qd[2] != kHeadDim / 2 || cd[2] != 1 || cd[3] != kTokenBytes ||
      (page != 64 && page != 128) || sf_q.element_count() != rows * kHeads ||
      weights.element_count() != rows * kHeads || row_lens.element_count() != rows ||
      request_ids.element_count() != rows || bd[0] != rows || ld[0] != rows ||
      ld[1] % kSplitKV != 0 || ld[1] < bd[1] * page ||
      schedule->element_count() != 2 * (kSm100SMs + 1)) {
    return InvalidArgument(kOp,
                           "inconsistent shapes (logits columns: a multiple of 384 covering "
                           "the page table; schedule [149, 2])");
  }
  if (rows > kSm100MaxRows) {
    return InvalidArgument(kOp, "more than " + std::to_string(kSm100MaxRows) + " query rows");
  }
  if (rows == 0) return ffi::Error::Success();
  if (cd[0] == 0 || bd[1] == 0) return InvalidArgument(kOp, "empty cache or page table");

  // TMA maps (DeepGEMM's): q [rows·h, d] packed e2m1, 64B-swizzled; sf_q [rows, h] (4 ue8m0 per
  // head); kv values [pages, P, d] inside each page and kv scales [pages, P] right after them
  // (one page per box, page ids gathered by the kernel); weights [rows, h] bf16.
  const uint8_t* base = cache.typed_data();
  const uint64_t page_bytes = uint64_t(page) * kTokenBytes;
  CUtensorMap q_map, sf_q_map, kv_map, sf_kv_map, w_map;
  static_assert(kHeadDim == 128 && kUmmaN == kBlockQ * kHeads, "EncodeMxfp4QueryMaps' shapes");
  const bool ok =
      EncodeMxfp4QueryMaps(&q_map, &sf_q_map, &w_map, q.untyped_data(), sf_q.untyped_data(),
                           weights.untyped_data(), uint64_t(rows), kHeads, kBlockQ) &&
      EncodeTiled(&kv_map, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, base,
                  {kHeadDim, uint64_t(page), uint64_t(cd[0])}, {kHeadDim / 2, page_bytes},
                  {kHeadDim, uint32_t(page), 1}, CU_TENSOR_MAP_SWIZZLE_64B) &&
      EncodeTiled(&sf_kv_map, CU_TENSOR_MAP_DATA_TYPE_INT32, base + page * (kHeadDim / 2),
                  {uint64_t(page), uint64_t(cd[0])}, {page_bytes}, {uint32_t(page), 1},
                  CU_TENSOR_MAP_SWIZZLE_NONE);
  if (!ok) return ffi::Error::Internal(std::string(kOp) + ": cuTensorMapEncodeTiled failed");

  int32_t* sched = schedule->typed_data();
  LaunchMetadata(stream, rows, row_lens.typed_data(), request_ids.typed_data(), sched);
  if (auto e = LastCudaError(kOp); e.failure()) return e;
  const auto main = page == 64 ? Kernel<64>() : Kernel<128>();
  main<<<kSm100SMs, kSpecializedThreads + kMathThreads, sizeof(Storage), stream>>>(
      uint32_t(rows), uint32_t(ld[1]), uint32_t(bd[1]),
      reinterpret_cast<const uint32_t*>(row_lens.typed_data()),
      reinterpret_cast<nv_bfloat16*>(logits->untyped_data()),
      reinterpret_cast<const uint32_t*>(row_block_table.typed_data()),
      reinterpret_cast<const uint32_t*>(request_ids.typed_data()),
      reinterpret_cast<const uint32_t*>(sched), q_map, sf_q_map, kv_map, sf_kv_map, w_map);
  return LastCudaError(kOp);
}

}  // namespace

cudaError_t PreparePagedMqaLogitsSm100() {
  return PrepareOnSm100(g_prepared, [] {
    cudaError_t err = SetMaxDynamicSmem(sizeof(Storage), Kernel<64>(), Kernel<128>());
    // The metadata kernels' largest shared-memory use: at the most rows each block size serves.
    const std::pair<decltype(MetadataKernel<256>()), int> metadata[] = {
        {MetadataKernel<256>(), MetadataSmem(512, 256)},
        {MetadataKernel<512>(), MetadataSmem(2048, 512)},
        {MetadataKernel<1024>(), MetadataSmem(kSm100MaxRows, 1024)}};
    for (const auto& [kernel, smem] : metadata) {
      if (err == cudaSuccess) err = SetMaxDynamicSmem(size_t(smem), kernel);
    }
    return err;
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PagedMqaLogitsSm100FFI, PagedMqaLogitsSm100,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::U8>>()    // q [rows, 32, 64] packed e2m1
                                  .Arg<Buffer<ffi::S32>>()   // sf_q [rows, 32] 4 x ue8m0
                                  .Arg<Buffer<ffi::BF16>>()  // weights [rows, 32]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, P, 1, 68] mxfp4
                                  .Arg<Buffer<ffi::S32>>()   // row lengths [rows], clamped
                                  .Arg<Buffer<ffi::S32>>()   // row block table [rows, max_pages]
                                  .Arg<Buffer<ffi::S32>>()   // request id of each row [rows]
                                  .Ret<Buffer<ffi::BF16>>()  // logits [rows, 384·n]
                                  .Ret<Buffer<ffi::S32>>(),  // schedule workspace [149, 2]
                              kCmdBuffer);

}  // namespace dsv41
