// dsv41_sm100_paged_sparse_mqa_logits <-> PagedSparseMqaLogitsSm100FFI
//   <-> dsv41_jax.sparse_paged_mqa_logits("ffi")
//
// DeepGEMM's SM100 paged sparse MQA logits (MXFP4 cache, bf16 logits) with its metadata kernel,
// instantiated ahead of time for sm_100a (its status: "sm100 sparse logits" in docs/status.md);
// on any other GPU the handler refuses (and the Python wrapper declines first).
// Launch recipe: DeepGEMM's csrc/jit_kernels/impls/sm100_sparse_mqa_logits.hpp.
#include <deep_gemm/impls/sm100_sparse_mqa_logits.cuh>
#include <deep_gemm/scheduler/sm100_sparse_mqa_logits_metadata.cuh>

#include "common.h"
#include "sm100_paged_sparse_mqa_logits.h"
#include "smxx_launch.cuh"
#include "tma.h"

namespace dsv41 {
namespace {

namespace layout = deep_gemm::layout::sparse_mqa_logits;
namespace sched = deep_gemm::sched::sparse_mqa_logits;

constexpr uint32_t kHeads = layout::kNumMaxHeads;  // 32
constexpr uint32_t kBlockQ = layout::kBlockQ;      // paired rows
constexpr uint32_t kSplitKV = 640;                 // MXFP4
constexpr uint32_t kMathWarpGroups = kSplitKV / 128;
constexpr uint32_t kQStages = 2, kKVStages = 5, kTmemStages = 5;
constexpr uint32_t kMetadataThreads = 256, kSplitsPerEntry = 8;

using Storage = layout::SharedStorage<kBlockQ, kSparseBlock, kSplitKV, kQStages, kKVStages,
                                      kTmemStages, cutlass::float_e2m1_t>;
using MetadataStorage = sched::SharedStorage<kBlockQ, kMaxSparseBlocks, kSplitKV / kSparseBlock,
                                             kSplitsPerEntry, kMetadataThreads>;

template <uint32_t kPage>
void Launch(cudaStream_t stream, int64_t rows, int64_t pages, int64_t max_pages, const uint8_t* q,
            const int32_t* sf_q, const uint16_t* weights, const uint8_t* cache,
            const int32_t* valid_lens, const int32_t* block_table, const int32_t* request_ids,
            const int32_t* blocks, uint16_t* logits, int64_t logits_stride, uint8_t* metadata,
            uint8_t* workspace, const CUtensorMap& q_map, const CUtensorMap& sf_map,
            const CUtensorMap& w_map) {
  const uint32_t num_q = uint32_t(rows);
  const int metadata_smem = int((sizeof(MetadataStorage) + 127) / 128 * 128);
  const int ctas = int(rows < kSm100SMs * 4 ? rows : kSm100SMs * 4);
  sched::sm100_sparse_mqa_logits_metadata<true, false, kBlockQ, kSplitKV, kSparseBlock,
                                          kMaxSparseBlocks, kPage, kSplitsPerEntry, kSm100SMs,
                                          kMetadataThreads>
      <<<ctas, kMetadataThreads, metadata_smem, stream>>>(
          num_q, uint32_t(pages * kPage), nullptr, nullptr,
          reinterpret_cast<const uint32_t*>(valid_lens),
          reinterpret_cast<const uint32_t*>(block_table), uint32_t(max_pages),
          reinterpret_cast<const uint32_t*>(request_ids), reinterpret_cast<const uint32_t*>(blocks),
          metadata, workspace);
  const uint32_t page_bytes = kPage * (128 / 2 + 4);
  deep_gemm::sm100_paged_sparse_mqa_logits<kHeads, kPage, kSparseBlock, kQStages, kKVStages,
                                           kTmemStages, kMathWarpGroups, kSm100SMs, kBlockQ, true>
      <<<kSm100SMs, layout::get_num_threads(kMathWarpGroups), sizeof(Storage), stream>>>(
          uint32_t(logits_stride), page_bytes, reinterpret_cast<nv_bfloat16*>(logits), cache,
          metadata, q_map, sf_map, w_map);
}

template <uint32_t kPage>
cudaError_t SetAttributes() {
  auto main = &deep_gemm::sm100_paged_sparse_mqa_logits<kHeads, kPage, kSparseBlock, kQStages,
                                                        kKVStages, kTmemStages, kMathWarpGroups,
                                                        kSm100SMs, kBlockQ, true>;
  auto meta = &sched::sm100_sparse_mqa_logits_metadata<true, false, kBlockQ, kSplitKV, kSparseBlock,
                                                       kMaxSparseBlocks, kPage, kSplitsPerEntry,
                                                       kSm100SMs, kMetadataThreads>;
  const cudaError_t err = SetMaxDynamicSmem(sizeof(Storage), main);
  return err == cudaSuccess ? SetMaxDynamicSmem((sizeof(MetadataStorage) + 127) / 128 * 128, meta)
                            : err;
}

PerDevice g_prepared;  // 1 once PreparePagedSparseMqaLogitsSm100 set the kernel attributes

ffi::Error PagedSparseMqaLogitsSm100(cudaStream_t stream, Buffer<ffi::U8> q, Buffer<ffi::S32> sf_q,
                                     Buffer<ffi::BF16> weights, Buffer<ffi::U8> cache,
                                     Buffer<ffi::S32> valid_lens, Buffer<ffi::S32> block_table,
                                     Buffer<ffi::S32> request_ids, Buffer<ffi::S32> blocks,
                                     Result<ffi::BF16> logits, Result<ffi::U8> metadata,
                                     Result<ffi::U8> workspace) {
  constexpr const char* kOp = "dsv41_sm100_paged_sparse_mqa_logits";
  if (auto e = RequireSm100(g_prepared, kOp); e.failure()) return e;
  const auto qd = q.dimensions(), cd = cache.dimensions(), bd = block_table.dimensions();
  const auto sd = blocks.dimensions(), ld = logits->dimensions();
  if (qd.size() != 3 || cd.size() != 4 || bd.size() != 2 || sd.size() != 2 || ld.size() != 2) {
    return InvalidArgument(kOp,
                           "expected q [rows, 32, 64], cache [pages, P, 1, 68], "
                           "block_table [rows, pages], blocks [rows, 2048], logits [rows, cols]");
  }
  const int64_t rows = qd[0];
  if (qd[1] != kHeads || qd[2] != 64 || cd[2] != 1 || cd[3] != 68 || sd[1] != kMaxSparseBlocks ||
      sf_q.element_count() != rows * kHeads || weights.element_count() != rows * kHeads ||
      valid_lens.element_count() != rows || request_ids.element_count() != rows || bd[0] != rows ||
      sd[0] != rows || ld[0] != rows || ld[1] < kMaxSparseBlocks * kSparseBlock ||
      metadata->element_count() < Sm100SparseMetadataBytes(rows) ||
      workspace->element_count() < Sm100SparseWorkspaceBytes(rows)) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (rows == 0) return ffi::Error::Success();
  // The metadata kernel's counters start at zero (its last CTA resets them for the next call).
  if (cudaMemsetAsync(workspace->untyped_data(), 0, Sm100SparseWorkspaceBytes(rows), stream) !=
      cudaSuccess) {
    return LastCudaError(kOp);
  }
  CUtensorMap q_map, sf_map, w_map;
  const bool ok =
      EncodeMxfp4QueryMaps(&q_map, &sf_map, &w_map, q.untyped_data(), sf_q.untyped_data(),
                           weights.untyped_data(), uint64_t(rows), kHeads, kBlockQ);
  if (!ok) return ffi::Error::Internal(std::string(kOp) + ": cuTensorMapEncodeTiled failed");
  auto* launch = cd[1] == 64 ? Launch<64> : cd[1] == 128 ? Launch<128> : nullptr;
  if (launch == nullptr) return InvalidArgument(kOp, "page size must be 64 or 128");
  launch(stream, rows, cd[0], bd[1], q.typed_data(), sf_q.typed_data(),
         reinterpret_cast<const uint16_t*>(weights.untyped_data()), cache.typed_data(),
         valid_lens.typed_data(), block_table.typed_data(), request_ids.typed_data(),
         blocks.typed_data(), reinterpret_cast<uint16_t*>(logits->untyped_data()), ld[1],
         metadata->typed_data(), workspace->typed_data(), q_map, sf_map, w_map);
  return LastCudaError(kOp);
}

}  // namespace

int64_t Sm100SparseMetadataBytes(int64_t rows) {
  constexpr int64_t kBlocksPerSplit = kSplitKV / kSparseBlock;
  constexpr int64_t kSplitBytes =
      sizeof(layout::KVSplitHeader) + kBlocksPerSplit * sizeof(layout::KVBlockInfo);
  const int64_t splits = rows * ((kMaxSparseBlocks + kBlocksPerSplit - 1) / kBlocksPerSplit);
  const int64_t entries = (splits + kSm100SMs - 1) / kSm100SMs * kSm100SMs;
  return sizeof(layout::MetadataHeader) + splits * kSplitBytes +
         entries * sizeof(layout::ScheduleEntry);
}

int64_t Sm100SparseWorkspaceBytes(int64_t rows) {
  return sizeof(layout::WorkspaceState) + rows * sizeof(layout::QBlockInfo);
}

cudaError_t PreparePagedSparseMqaLogitsSm100() {
  return PrepareOnSm100(g_prepared, [] {
    const cudaError_t err = SetAttributes<64>();
    return err == cudaSuccess ? SetAttributes<128>() : err;
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PagedSparseMqaLogitsSm100FFI, PagedSparseMqaLogitsSm100,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::U8>>()    // q [rows, 32, 64] packed e2m1
                                  .Arg<Buffer<ffi::S32>>()   // sf_q [rows, 32] 4 x ue8m0
                                  .Arg<Buffer<ffi::BF16>>()  // weights [rows, 32]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, P, 1, 68] mxfp4
                                  .Arg<Buffer<ffi::S32>>()   // valid_lens [rows]
                                  .Arg<Buffer<ffi::S32>>()   // block_table [rows, max_pages]
                                  .Arg<Buffer<ffi::S32>>()   // request_ids [rows] (pairs rows)
                                  .Arg<Buffer<ffi::S32>>()   // blocks [rows, 2048] ascending
                                  .Ret<Buffer<ffi::BF16>>()  // logits [rows, >= 16384]
                                  .Ret<Buffer<ffi::U8>>()    // metadata workspace
                                  .Ret<Buffer<ffi::U8>>(),   // scheduler workspace
                              kCmdBuffer);

}  // namespace dsv41
