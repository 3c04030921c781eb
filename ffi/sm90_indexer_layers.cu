// dsv41_sm90_dense_select  <-> DenseSelectSm90FFI  <-> dsv41_jax.indexer (fused layers, SM90)
// dsv41_sm90_publish       <-> PublishSm90FFI      <-> dsv41_jax.indexer (fused layers, SM90)
// dsv41_sm90_sparse_select <-> SparseSelectSm90FFI <-> dsv41_jax.indexer (fused layers, SM90)
//
// One indexer layer of a decode step as one custom call: the same kernels, in the same order
// and on the same data, as the layer's ops called one by one (paged logits, the exact select,
// block scores, the top-C blocks, the candidate table, the candidate gather), so the results are
// bitwise those of the ops. A serving loop pays XLA's per-call host work once a layer instead of
// once an op. The DeepGEMM schedule is an input: it depends only on the lengths, so a step
// computes it once (dsv41_sm90_paged_mqa_schedule) for all the layers that share them.
// Intermediates (logits, block scores, the compact cache) are workspace results.
#include <algorithm>

#include "common.h"
#include "sm90_paged_mqa_logits.h"
#include "smxx_block_ops.cuh"
#include "smxx_gather_blocks.cuh"
#include "smxx_sort_blocks.cuh"
#include "topk.h"

namespace dsv41 {
namespace {

ffi::ErrorOr<Select> SelectOf(const char* op, int32_t select) {
  if (select < 0 || select > 2) return InvalidArgument(op, "select must be 0, 1 or 2");
  return static_cast<Select>(select);
}

// The paged logits of `call` (a layer's dense scores), then `select`'s top-k of them.
ffi::Error LogitsThenTopk(const char* op, cudaStream_t stream, const Sm90PagedLogits& call,
                          const int32_t* lens, const int32_t* schedule, const int32_t* row_lens,
                          const int32_t* members, int64_t num_members, Select select, int32_t k,
                          int32_t block_size, int32_t* out) {
  if (auto e = LaunchSm90PagedLogits(op, stream, call, lens, schedule); e.failure()) return e;
  const TopkArgs args{call.logits, row_lens, nullptr, members, out, call.batch * call.next_n,
                      call.cols,   num_members, k, block_size, TopkMode::kPositions, false};
  return CudaStatus(op, LaunchTopk(select, args, stream));
}

ffi::Error DenseSelectSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                           Buffer<ffi::U8> kv, Buffer<ffi::S32> lens, Buffer<ffi::S32> row_lens,
                           Buffer<ffi::S32> block_table, Buffer<ffi::S32> schedule,
                           Buffer<ffi::S32> members, Result<ffi::S32> out,
                           Result<ffi::F32> logits, int32_t k, int32_t select, int32_t block_size,
                           bool has_members) {
  constexpr const char* kOp = "dsv41_sm90_dense_select";
  const auto ld = logits->dimensions(), od = out->dimensions(), md = members.dimensions();
  if (ld.size() != 2 || od.size() != 2 || md.size() != 2) {
    return InvalidArgument(kOp, "expected logits [rows, cols], out [rows, k], members [rows, m]");
  }
  auto call = Sm90PagedLogitsOf(kOp, q, weights, kv, block_table, logits->typed_data(), ld[0], ld[1]);
  if (call.has_error()) return call.error();
  auto sel = SelectOf(kOp, select);
  if (sel.has_error()) return sel.error();
  const int64_t rows = ld[0];
  if (lens.element_count() != call->batch || row_lens.element_count() != rows ||
      schedule.element_count() != 2 * kSm90ScheduleRows || od[0] != rows || od[1] != k ||
      md[0] != rows) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (auto e = CheckTopk(kOp, *sel, ld[1], md[1], has_members, k, block_size, 0); e.failure()) {
    return e;
  }
  if (rows == 0) return ffi::Error::Success();
  return LogitsThenTopk(kOp, stream, *call, lens.typed_data(), schedule.typed_data(),
                        row_lens.typed_data(), has_members ? members.typed_data() : nullptr,
                        has_members ? md[1] : 0, *sel, k, block_size, out->typed_data());
}

ffi::Error PublishSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                       Buffer<ffi::U8> kv, Buffer<ffi::S32> lens, Buffer<ffi::S32> row_lens,
                       Buffer<ffi::S32> block_table, Buffer<ffi::S32> row_block_table,
                       Buffer<ffi::S32> schedule, Buffer<ffi::S32> all_selected,
                       Result<ffi::S32> out, Result<ffi::S32> blocks, Result<ffi::S32> count,
                       Result<ffi::S32> valid_lens, Result<ffi::S32> physical,
                       Result<ffi::F32> logits, Result<ffi::F32> block_scores,
                       Result<ffi::S32> selected, int32_t k, int32_t select, int32_t select_c,
                       int32_t block_size, int32_t page_size, bool all_blocks) {
  constexpr const char* kOp = "dsv41_sm90_publish";
  const auto ld = logits->dimensions(), od = out->dimensions(), bd = blocks->dimensions();
  const auto rd = row_block_table.dimensions(), sd = block_scores->dimensions();
  if (ld.size() != 2 || od.size() != 2 || bd.size() != 2 || rd.size() != 2 || sd.size() != 2) {
    return InvalidArgument(kOp, "expected 2-d logits, out, blocks, row_block_table, block_scores");
  }
  auto call = Sm90PagedLogitsOf(kOp, q, weights, kv, block_table, logits->typed_data(), ld[0], ld[1]);
  if (call.has_error()) return call.error();
  auto sel = SelectOf(kOp, select), sel_c = SelectOf(kOp, select_c);
  if (sel.has_error()) return sel.error();
  if (sel_c.has_error()) return sel_c.error();
  const int64_t rows = ld[0], c = bd[1], cols = ld[1];
  const int64_t nb = (cols + block_size - 1) / std::max<int64_t>(block_size, 1);
  if (lens.element_count() != call->batch || row_lens.element_count() != rows ||
      schedule.element_count() != 2 * kSm90ScheduleRows || od[0] != rows || od[1] != k ||
      bd[0] != rows || physical->element_count() != rows * c || count->element_count() != rows ||
      valid_lens->element_count() != rows || rd[0] != rows || rd[1] < 1) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (all_blocks ? all_selected.element_count() != rows * c
                 : (sd[0] != rows || sd[1] != nb || selected->element_count() != rows * c)) {
    return InvalidArgument(kOp, "inconsistent shapes of the selected blocks or block scores");
  }
  if (block_size <= 0 || page_size <= 0 || page_size % block_size != 0) {
    return InvalidArgument(kOp, "page_size must be a positive multiple of block_size");
  }
  if ((rd[1] * page_size + block_size - 1) / block_size > kMaxSortBlocks || c > kMaxSortCandidates) {
    return InvalidArgument(kOp, "rows longer than 2^20 blocks or tables wider than 4096 blocks");
  }
  if (auto e = CheckTopk(kOp, *sel, cols, 0, false, k, block_size, 0); e.failure()) return e;
  if (!all_blocks) {
    if (auto e = CheckTopk(kOp, *sel_c, nb, 0, false, int32_t(c), block_size, 1); e.failure()) {
      return e;
    }
  }
  if (rows == 0) return ffi::Error::Success();
  if (auto e = LogitsThenTopk(kOp, stream, *call, lens.typed_data(), schedule.typed_data(),
                              row_lens.typed_data(), nullptr, 0, *sel, k, block_size,
                              out->typed_data());
      e.failure()) {
    return e;
  }
  const int32_t* chosen = all_selected.typed_data();
  if (!all_blocks) {  // block scores, then the top-C blocks (newest pinned)
    LaunchBlockAmax(logits->typed_data(), cols, cols, row_lens.typed_data(), rows, block_size,
                    true, block_scores->typed_data(), nb, stream);
    if (auto e = LastCudaError(kOp); e.failure()) return e;
    const TopkArgs args{block_scores->typed_data(), row_lens.typed_data(), nullptr, nullptr,
                        selected->typed_data(), rows, nb, 0, int32_t(c), block_size,
                        TopkMode::kCandidateBlocks, false};
    if (auto e = CudaStatus(kOp, LaunchTopk(*sel_c, args, stream)); e.failure()) return e;
    chosen = selected->typed_data();
  }
  const SortBlocksArgs sort{chosen, row_lens.typed_data(), row_block_table.typed_data(),
                            blocks->typed_data(), count->typed_data(), valid_lens->typed_data(),
                            physical->typed_data(), rows, c, rd[1], block_size, page_size};
  return CudaStatus(kOp, LaunchSortCandidateBlocks(sort, stream));
}

ffi::Error SparseSelectSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                            Buffer<ffi::U8> kv, Buffer<ffi::S32> physical, Buffer<ffi::S32> blocks,
                            Buffer<ffi::S32> valid_lens, Buffer<ffi::S32> compact_table,
                            Buffer<ffi::S32> schedule, Result<ffi::S32> out,
                            Result<ffi::U8> compact, Result<ffi::F32> logits,
                            Result<ffi::S32> columns, int32_t k, int32_t select,
                            int32_t block_size) {
  constexpr const char* kOp = "dsv41_sm90_sparse_select";
  const auto qd = q.dimensions(), kd = kv.dimensions(), pd = physical.dimensions();
  const auto cd = compact->dimensions(), ld = logits->dimensions(), td = compact_table.dimensions();
  if (q.element_type() != ffi::F8E4M3FN) return InvalidArgument(kOp, "q must be float8_e4m3fn");
  if (qd.size() != 4 || kd.size() != 4 || pd.size() != 2 || cd.size() != 4 || ld.size() != 2 ||
      td.size() != 2) {
    return InvalidArgument(kOp, "expected q [b, n, h, d], caches [pages, 64, 1, 132], "
                                "physical [rows, C], logits [rows, C * 8], table [rows, C / 8]");
  }
  const int64_t rows = qd[0] * qd[1], heads = qd[2], c = pd[1];
  auto sel = SelectOf(kOp, select);
  if (sel.has_error()) return sel.error();
  if (block_size != kGatherBlockSize || c % 32 != 0 || c == 0) {
    return InvalidArgument(kOp, "needs blocks of 8 and C a positive multiple of 32");
  }
  if (qd[3] != 128 || (heads != 32 && heads != 64) || kd[1] != kGatherPageSize || kd[2] != 1 ||
      kd[3] != kGatherHeadDim + 4) {
    return InvalidArgument(kOp, "needs head_dim 128, 32 or 64 heads and an fp8 cache of 64-token pages");
  }
  if (pd[0] != rows || blocks.element_count() != rows * c || valid_lens.element_count() != rows ||
      td[0] != rows || td[1] != c / 8 || cd[0] != rows * c / 8 || cd[1] != kd[1] || cd[2] != 1 ||
      cd[3] != kd[3] || ld[0] != rows || ld[1] != c * block_size ||
      weights.element_count() != rows * heads || out->element_count() != rows * k ||
      columns->element_count() != rows * k ||
      schedule.element_count() != 2 * kSm90ScheduleRows || rows > 1024) {
    return InvalidArgument(kOp, "inconsistent shapes (at most 1024 rows)");
  }
  if (auto e = CheckTopk(kOp, *sel, ld[1], 0, false, k, block_size, 0); e.failure()) return e;
  if (rows == 0) return ffi::Error::Success();
  LaunchGatherCandidateBlocks(kv.typed_data(), kd[0], physical.typed_data(), rows, c,
                              compact->typed_data(), stream);
  if (auto e = LastCudaError(kOp); e.failure()) return e;
  // One query row per compact request: q [b, n, h, d] is [b * n, 1, h, d] in memory.
  const Sm90PagedLogits call{q.untyped_data(), weights.typed_data(), compact->typed_data(),
                             compact_table.typed_data(), logits->typed_data(), rows, 1, heads,
                             rows * c / 8, c / 8, c * block_size};
  if (auto e = LogitsThenTopk(kOp, stream, call, valid_lens.typed_data(), schedule.typed_data(),
                              valid_lens.typed_data(), nullptr, 0, *sel, k, block_size,
                              columns->typed_data());
      e.failure()) {
    return e;
  }
  LaunchColumnsToPositions(columns->typed_data(), blocks.typed_data(), rows, k, c, block_size,
                           out->typed_data(), stream);
  return LastCudaError(kOp);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DenseSelectSm90FFI, DenseSelectSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()   // lens [batch], clamped
                                  .Arg<Buffer<ffi::S32>>()   // row_lens [rows], clamped
                                  .Arg<Buffer<ffi::S32>>()   // block_table [batch, max_pages]
                                  .Arg<Buffer<ffi::S32>>()   // schedule [257, 2] over lens
                                  .Arg<Buffer<ffi::S32>>()   // members [rows, m] (has_members)
                                  .Ret<Buffer<ffi::S32>>()   // out [rows, k]
                                  .Ret<Buffer<ffi::F32>>()   // logits workspace [rows, cols]
                                  .Attr<int32_t>("k")
                                  .Attr<int32_t>("select")
                                  .Attr<int32_t>("block_size")
                                  .Attr<bool>("has_members"),
                              kCmdBuffer);

XLA_FFI_DEFINE_HANDLER_SYMBOL(PublishSm90FFI, PublishSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()   // lens [batch], clamped
                                  .Arg<Buffer<ffi::S32>>()   // row_lens [rows], clamped
                                  .Arg<Buffer<ffi::S32>>()   // block_table [batch, max_pages]
                                  .Arg<Buffer<ffi::S32>>()   // row_block_table [rows, max_pages]
                                  .Arg<Buffer<ffi::S32>>()   // schedule [257, 2] over lens
                                  .Arg<Buffer<ffi::S32>>()   // all_selected [rows, C] (all_blocks)
                                  .Ret<Buffer<ffi::S32>>()   // out [rows, k]
                                  .Ret<Buffer<ffi::S32>>()   // blocks [rows, C]
                                  .Ret<Buffer<ffi::S32>>()   // count [rows]
                                  .Ret<Buffer<ffi::S32>>()   // valid_lens [rows]
                                  .Ret<Buffer<ffi::S32>>()   // physical [rows, C]
                                  .Ret<Buffer<ffi::F32>>()   // logits workspace [rows, cols]
                                  .Ret<Buffer<ffi::F32>>()   // block scores workspace [rows, nb]
                                  .Ret<Buffer<ffi::S32>>()   // selected workspace [rows, C]
                                  .Attr<int32_t>("k")
                                  .Attr<int32_t>("select")
                                  .Attr<int32_t>("select_c")
                                  .Attr<int32_t>("block_size")
                                  .Attr<int32_t>("page_size")
                                  .Attr<bool>("all_blocks"),
                              kCmdBuffer);

XLA_FFI_DEFINE_HANDLER_SYMBOL(SparseSelectSm90FFI, SparseSelectSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()     // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()   // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()    // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()   // table physical [rows, C]
                                  .Arg<Buffer<ffi::S32>>()   // table blocks [rows, C]
                                  .Arg<Buffer<ffi::S32>>()   // valid_lens [rows], <= C * 8
                                  .Arg<Buffer<ffi::S32>>()   // compact page table [rows, C / 8]
                                  .Arg<Buffer<ffi::S32>>()   // schedule [257, 2] over valid_lens
                                  .Ret<Buffer<ffi::S32>>()   // out [rows, k] positions
                                  .Ret<Buffer<ffi::U8>>()    // compact cache [rows * C / 8, ...]
                                  .Ret<Buffer<ffi::F32>>()   // logits workspace [rows, C * 8]
                                  .Ret<Buffer<ffi::S32>>()   // columns workspace [rows, k]
                                  .Attr<int32_t>("k")
                                  .Attr<int32_t>("select")
                                  .Attr<int32_t>("block_size"),
                              kCmdBuffer);

}  // namespace dsv41
