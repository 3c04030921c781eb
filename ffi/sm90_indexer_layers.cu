// dsv41_sm90_dense_select  <-> DenseSelectSm90FFI  <-> dsv41_jax.indexer (fused layers, SM90)
// dsv41_sm90_publish       <-> PublishSm90FFI      <-> dsv41_jax.indexer (fused layers, SM90)
// dsv41_sm90_sparse_select <-> SparseSelectSm90FFI <-> dsv41_jax.indexer (fused layers, SM90)
//
// One indexer layer of a decode step as one custom call: the same kernels, in the same order
// and on the same data, as the layer's ops called one by one (paged logits, the exact select,
// block scores, the top-C blocks, the candidate table, the sparse logits), so the results are
// bitwise those of the ops; where the short select takes the top-k it writes the block scores
// as well (ShortTopkWritesBlockMax), and where it takes the top-C the candidate table
// (ShortTopkWritesTable): the amax and sort kernels' results without those kernels. A serving
// loop pays XLA's per-call host work once a layer instead of once an op. The DeepGEMM schedule
// is an input: it depends only on the lengths, so a step computes it once
// (dsv41_sm90_paged_mqa_schedule) for all the layers that share them. Intermediates (logits,
// block scores, chosen columns) are workspace results. The plans are in sm90_indexer_layers.h.
#include "sm90_indexer_layers.h"

#include <algorithm>

#include "sm90_sparse_select.h"
#include "smxx_block_ops.cuh"
#include "smxx_short_topk.cuh"
#include "smxx_sort_blocks.cuh"

namespace dsv41 {
ffi::Error CheckOut(const char* op, const Buffer<ffi::S32>& out, int64_t rows, int32_t k) {
  const auto od = out.dimensions();
  if (od.size() != 2 || od[0] != rows || od[1] != k) {
    return InvalidArgument(op, "expected out [rows, k]");
  }
  return ffi::Error::Success();
}

namespace {

ffi::ErrorOr<Select> SelectOf(const char* op, int32_t select) {
  if (select < 0 || select > 2) return InvalidArgument(op, "select must be 0, 1 or 2");
  return static_cast<Select>(select);
}

ffi::Error ScheduleShape(const char* op, const Buffer<ffi::S32>& schedule) {
  if (schedule.element_count() != 2 * kSm90ScheduleRows) {
    return InvalidArgument(op, "expected schedule [257, 2]");
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::ErrorOr<DensePlan> DensePlanOf(const char* op, const ffi::AnyBuffer& q,
                                    const Buffer<ffi::F32>& weights, const Buffer<ffi::U8>& kv,
                                    const Buffer<ffi::S32>& lens, const Buffer<ffi::S32>& row_lens,
                                    const Buffer<ffi::S32>& block_table,
                                    const Buffer<ffi::S32>* members, int32_t* out,
                                    const Buffer<ffi::F32>& logits, const Buffer<ffi::U32>& split,
                                    int32_t k, int32_t select, int32_t block_size) {
  const auto ld = logits.dimensions();
  if (ld.size() != 2 || (members && members->dimensions().size() != 2)) {
    return InvalidArgument(op, "expected logits [rows, cols], members [rows, m]");
  }
  auto call = Sm90PagedLogitsOf(op, q, weights, kv, block_table, logits.typed_data(), ld[0], ld[1]);
  if (call.has_error()) return call.error();
  auto sel = SelectOf(op, select);
  if (sel.has_error()) return sel.error();
  const int64_t rows = ld[0], m = members ? members->dimensions()[1] : 0;
  if (lens.element_count() != call->batch || row_lens.element_count() != rows ||
      (members && members->dimensions()[0] != rows)) {
    return InvalidArgument(op, "inconsistent shapes");
  }
  if (auto e = CheckTopk(op, *sel, ld[1], m, members != nullptr, k, block_size, 0); e.failure()) {
    return e;
  }
  return DensePlan{*call,
                   lens.typed_data(),
                   row_lens.typed_data(),
                   members ? members->typed_data() : nullptr,
                   m,
                   out,
                   split.typed_data(),
                   int64_t(split.element_count()),
                   *sel,
                   k,
                   block_size};
}

ffi::Error LaunchDense(const char* op, cudaStream_t stream, const DensePlan& p,
                       const int32_t* schedule, const ShortOutputs* outputs) {
  if (p.call.batch == 0) return ffi::Error::Success();
  if (auto e = LaunchSm90PagedLogits(op, stream, p.call, p.lens, schedule); e.failure()) return e;
  const TopkArgs args{p.call.logits,
                      p.row_lens,
                      nullptr,
                      p.members,
                      p.out,
                      p.call.batch * p.call.next_n,
                      p.call.cols,
                      p.num_members,
                      p.k,
                      p.block_size,
                      TopkMode::kPositions,
                      false,
                      p.split,
                      p.split_words};
  // `outputs` only where the short select takes the top-k (LaunchPublish checked it).
  if (outputs != nullptr) return CudaStatus(op, LaunchShortTopk(args, stream, *outputs));
  return CudaStatus(op, LaunchTopk(p.select, args, stream));
}

ffi::ErrorOr<PublishPlan> PublishPlanOf(
    const char* op, const ffi::AnyBuffer& q, const Buffer<ffi::F32>& weights,
    const Buffer<ffi::U8>& kv, const Buffer<ffi::S32>& lens, const Buffer<ffi::S32>& row_lens,
    const Buffer<ffi::S32>& block_table, const Buffer<ffi::S32>& row_block_table, int32_t* out,
    const PublishTable& table, const Buffer<ffi::F32>& logits, const Buffer<ffi::F32>& block_scores,
    const Buffer<ffi::S32>& selected, const Buffer<ffi::U32>& split, int32_t k, int32_t select,
    int32_t select_c, int32_t block_size, int32_t page_size, bool all_blocks) {
  auto topk = DensePlanOf(op, q, weights, kv, lens, row_lens, block_table, nullptr, out, logits,
                          split, k, select, block_size);
  if (topk.has_error()) return topk.error();
  auto sel_c = SelectOf(op, select_c);
  if (sel_c.has_error()) return sel_c.error();
  const auto bd = table.blocks.dimensions(), rd = row_block_table.dimensions();
  const auto sd = block_scores.dimensions();
  if (bd.size() != 2 || rd.size() != 2 || sd.size() != 2) {
    return InvalidArgument(op, "expected 2-d blocks, row_block_table, block_scores");
  }
  const int64_t rows = logits.dimensions()[0], cols = logits.dimensions()[1], c = bd[1];
  const int64_t nb = (cols + block_size - 1) / std::max<int32_t>(block_size, 1);
  if (bd[0] != rows || table.physical.element_count() != rows * c ||
      table.count.element_count() != rows || table.valid_lens.element_count() != rows ||
      rd[0] != rows || rd[1] < 1) {
    return InvalidArgument(op, "inconsistent shapes");
  }
  if (!all_blocks && (sd[0] != rows || sd[1] != nb || selected.element_count() != rows * c)) {
    return InvalidArgument(op, "inconsistent shapes of the selected blocks or block scores");
  }
  if (block_size <= 0 || page_size <= 0 || page_size % block_size != 0) {
    return InvalidArgument(op, "page_size must be a positive multiple of block_size");
  }
  if ((rd[1] * page_size + block_size - 1) / block_size > kMaxSortBlocks ||
      c > kMaxSortCandidates) {
    return InvalidArgument(op, "rows longer than 2^20 blocks or tables wider than 4096 blocks");
  }
  if (!all_blocks) {
    if (auto e = CheckTopk(op, *sel_c, nb, 0, false, int32_t(c), block_size, 1); e.failure()) {
      return e;
    }
  }
  return PublishPlan{*topk,
                     row_block_table.typed_data(),
                     table.blocks.typed_data(),
                     table.count.typed_data(),
                     table.valid_lens.typed_data(),
                     table.physical.typed_data(),
                     block_scores.typed_data(),
                     selected.typed_data(),
                     c,
                     nb,
                     rd[1],
                     *sel_c,
                     page_size,
                     all_blocks};
}

ffi::Error LaunchPublish(const char* op, cudaStream_t stream, const PublishPlan& p,
                         const int32_t* schedule) {
  const int64_t rows = p.topk.call.batch * p.topk.call.next_n, cols = p.topk.call.cols;
  if (rows == 0) return ffi::Error::Success();
  // Where it can, the short select writes the block scores as it loads the logits (no
  // block-amax kernel), or the table of every block (no sort).
  const bool short_topk = p.topk.select == Select::kShort;
  const bool scores_in_topk =
      !p.all_blocks && short_topk && ShortTopkWritesBlockMax(cols, p.topk.block_size);
  const bool table_in_topk =
      p.all_blocks && short_topk &&
      ShortTopkWritesEveryBlock(cols, p.c, p.topk.block_size, p.row_table_width, p.page_size);
  ShortOutputs outputs;
  if (scores_in_topk) outputs.block_max = p.block_scores;
  if (table_in_topk) {
    outputs.every_block = TableOut{p.row_block_table, p.blocks,          p.count,     p.valid_lens,
                                   p.physical,        p.row_table_width, p.page_size, p.c};
  }
  const bool extra = scores_in_topk || table_in_topk;
  if (auto e = LaunchDense(op, stream, p.topk, schedule, extra ? &outputs : nullptr); e.failure()) {
    return e;
  }
  if (table_in_topk) return ffi::Error::Success();
  const int32_t* chosen = nullptr;  // all_blocks: the sort's every block
  if (!p.all_blocks) {              // block scores, then the top-C blocks (newest pinned)
    if (!scores_in_topk) {
      LaunchBlockAmax(p.topk.call.logits, cols, cols, p.topk.row_lens, rows, p.topk.block_size,
                      true, p.block_scores, p.nb, stream);
      if (auto e = LastCudaError(op); e.failure()) return e;
    }
    const TopkArgs args{p.block_scores,
                        p.topk.row_lens,
                        nullptr,
                        nullptr,
                        p.selected,
                        rows,
                        p.nb,
                        0,
                        int32_t(p.c),
                        p.topk.block_size,
                        TopkMode::kCandidateBlocks,
                        false};
    // The short select writes the table as it selects where it can (no sort kernel).
    const bool table =
        p.select_c == Select::kShort &&
        ShortTopkWritesTable(p.nb, p.topk.block_size, p.row_table_width, p.page_size);
    if (table) {
      const TableOut out{p.row_block_table, p.blocks,          p.count,     p.valid_lens,
                         p.physical,        p.row_table_width, p.page_size, p.c};
      return CudaStatus(op, LaunchShortTopk(args, stream, ShortOutputs{nullptr, out}));
    }
    if (auto e = CudaStatus(op, LaunchTopk(p.select_c, args, stream)); e.failure()) return e;
    chosen = p.selected;
  }
  const SortBlocksArgs sort{chosen,  p.topk.row_lens,   p.row_block_table, p.blocks,
                            p.count, p.valid_lens,      p.physical,        rows,
                            p.c,     p.row_table_width, p.topk.block_size, p.page_size};
  return CudaStatus(op, LaunchSortCandidateBlocks(sort, stream));
}

ffi::ErrorOr<SparsePlan> SparsePlanOf(
    const char* op, const ffi::AnyBuffer& q, const Buffer<ffi::F32>& weights,
    const Buffer<ffi::U8>& kv, const Buffer<ffi::S32>& physical, const Buffer<ffi::S32>& blocks,
    const Buffer<ffi::S32>& valid_lens, int32_t* out, const Buffer<ffi::F32>& logits,
    const Buffer<ffi::S32>& columns, int32_t k, int32_t select, int32_t block_size) {
  auto call = Sm90SparseLogitsOf(op, q, weights, kv, physical, valid_lens, logits);
  if (call.has_error()) return call.error();
  const bool onchip = select == kSelectOnChip;  // then the plan's `select` is never read
  auto sel = SelectOf(op, onchip ? int32_t(Select::kShort) : select);
  if (sel.has_error()) return sel.error();
  const int64_t rows = call->rows, cols = logits.dimensions()[1];
  if (block_size != 8) return InvalidArgument(op, "needs candidate blocks of 8");
  if (blocks.element_count() != rows * call->c || columns.element_count() != rows * k) {
    return InvalidArgument(op, "inconsistent shapes (blocks [rows, C], columns [rows, k])");
  }
  if (onchip) {
    if (k <= 0) return InvalidArgument(op, "k must be positive");
    if (cols > SparseSelectMaxColumns()) {
      return InvalidArgument(op, "the on-chip select takes rows of at most " +
                                     std::to_string(SparseSelectMaxColumns()) + " columns");
    }
  } else if (auto e = CheckTopk(op, *sel, cols, 0, false, k, block_size, 0); e.failure()) {
    return e;
  }
  return SparsePlan{*call, blocks.typed_data(), columns.typed_data(), out, *sel, onchip,
                    k,     block_size};
}

ffi::Error LaunchSparse(const char* op, cudaStream_t stream, const SparsePlan& p) {
  const int64_t rows = p.call.rows, cols = p.call.c * p.block_size;
  if (rows == 0) return ffi::Error::Success();
  if (p.onchip) return LaunchSm90SparseSelect(op, stream, p.call, p.blocks, p.k, p.out);
  if (auto e = LaunchSm90SparseLogits(op, stream, p.call); e.failure()) return e;
  // The select reads only the columns below each row's valid length.
  const TopkArgs args{
      p.call.logits, p.call.valid_lens,    nullptr, nullptr, p.columns, rows, cols, 0, p.k,
      p.block_size,  TopkMode::kPositions, false};
  if (auto e = CudaStatus(op, LaunchTopk(p.select, args, stream)); e.failure()) return e;
  LaunchColumnsToPositions(p.columns, p.blocks, rows, p.k, p.call.c, p.block_size, p.out, stream);
  return LastCudaError(op);
}

namespace {

ffi::Error DenseSelectSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                           Buffer<ffi::U8> kv, Buffer<ffi::S32> lens, Buffer<ffi::S32> row_lens,
                           Buffer<ffi::S32> block_table, Buffer<ffi::S32> schedule,
                           Buffer<ffi::S32> members, Result<ffi::S32> out, Result<ffi::F32> logits,
                           Result<ffi::U32> split, int32_t k, int32_t select, int32_t block_size,
                           bool has_members) {
  constexpr const char* kOp = "dsv41_sm90_dense_select";
  if (auto e = ScheduleShape(kOp, schedule); e.failure()) return e;
  if (auto e = CheckOut(kOp, *out, row_lens.element_count(), k); e.failure()) return e;
  auto plan = DensePlanOf(kOp, q, weights, kv, lens, row_lens, block_table,
                          has_members ? &members : nullptr, out->typed_data(), *logits, *split, k,
                          select, block_size);
  if (plan.has_error()) return plan.error();
  return LaunchDense(kOp, stream, *plan, schedule.typed_data());
}

ffi::Error PublishSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                       Buffer<ffi::U8> kv, Buffer<ffi::S32> lens, Buffer<ffi::S32> row_lens,
                       Buffer<ffi::S32> block_table, Buffer<ffi::S32> row_block_table,
                       Buffer<ffi::S32> schedule, Result<ffi::S32> out, Result<ffi::S32> blocks,
                       Result<ffi::S32> count, Result<ffi::S32> valid_lens,
                       Result<ffi::S32> physical, Result<ffi::F32> logits,
                       Result<ffi::F32> block_scores, Result<ffi::S32> selected,
                       Result<ffi::U32> split, int32_t k, int32_t select, int32_t select_c,
                       int32_t block_size, int32_t page_size, bool all_blocks) {
  constexpr const char* kOp = "dsv41_sm90_publish";
  if (auto e = ScheduleShape(kOp, schedule); e.failure()) return e;
  if (auto e = CheckOut(kOp, *out, row_lens.element_count(), k); e.failure()) return e;
  auto plan = PublishPlanOf(kOp, q, weights, kv, lens, row_lens, block_table, row_block_table,
                            out->typed_data(), {*blocks, *count, *valid_lens, *physical}, *logits,
                            *block_scores, *selected, *split, k, select, select_c, block_size,
                            page_size, all_blocks);
  if (plan.has_error()) return plan.error();
  return LaunchPublish(kOp, stream, *plan, schedule.typed_data());
}

ffi::Error SparseSelectSm90(cudaStream_t stream, ffi::AnyBuffer q, Buffer<ffi::F32> weights,
                            Buffer<ffi::U8> kv, Buffer<ffi::S32> physical, Buffer<ffi::S32> blocks,
                            Buffer<ffi::S32> valid_lens, Result<ffi::S32> out,
                            Result<ffi::F32> logits, Result<ffi::S32> columns, int32_t k,
                            int32_t select, int32_t block_size) {
  constexpr const char* kOp = "dsv41_sm90_sparse_select";
  if (auto e = CheckOut(kOp, *out, valid_lens.element_count(), k); e.failure()) return e;
  auto plan = SparsePlanOf(kOp, q, weights, kv, physical, blocks, valid_lens, out->typed_data(),
                           *logits, *columns, k, select, block_size);
  if (plan.has_error()) return plan.error();
  return LaunchSparse(kOp, stream, *plan);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DenseSelectSm90FFI, DenseSelectSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()    // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()  // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()   // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()  // lens [batch], clamped
                                  .Arg<Buffer<ffi::S32>>()  // row_lens [rows], clamped
                                  .Arg<Buffer<ffi::S32>>()  // block_table [batch, max_pages]
                                  .Arg<Buffer<ffi::S32>>()  // schedule [257, 2] over lens
                                  .Arg<Buffer<ffi::S32>>()  // members [rows, m] (has_members)
                                  .Ret<Buffer<ffi::S32>>()  // out [rows, k]
                                  .Ret<Buffer<ffi::F32>>()  // logits workspace [rows, cols]
                                  .Ret<Buffer<ffi::U32>>()  // split-rows workspace (words)
                                  .Attr<int32_t>("k")
                                  .Attr<int32_t>("select")
                                  .Attr<int32_t>("block_size")
                                  .Attr<bool>("has_members"),
                              kCmdBuffer);

XLA_FFI_DEFINE_HANDLER_SYMBOL(PublishSm90FFI, PublishSm90,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<ffi::AnyBuffer>()    // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()  // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()   // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()  // lens [batch], clamped
                                  .Arg<Buffer<ffi::S32>>()  // row_lens [rows], clamped
                                  .Arg<Buffer<ffi::S32>>()  // block_table [batch, max_pages]
                                  .Arg<Buffer<ffi::S32>>()  // row_block_table [rows, max_pages]
                                  .Arg<Buffer<ffi::S32>>()  // schedule [257, 2] over lens
                                  .Ret<Buffer<ffi::S32>>()  // out [rows, k]
                                  .Ret<Buffer<ffi::S32>>()  // blocks [rows, C]
                                  .Ret<Buffer<ffi::S32>>()  // count [rows]
                                  .Ret<Buffer<ffi::S32>>()  // valid_lens [rows]
                                  .Ret<Buffer<ffi::S32>>()  // physical [rows, C]
                                  .Ret<Buffer<ffi::F32>>()  // logits workspace [rows, cols]
                                  .Ret<Buffer<ffi::F32>>()  // block scores workspace [rows, nb]
                                  .Ret<Buffer<ffi::S32>>()  // selected workspace [rows, C]
                                  .Ret<Buffer<ffi::U32>>()  // split-rows workspace (words)
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
                                  .Arg<ffi::AnyBuffer>()    // q [batch, next_n, H, 128] fp8
                                  .Arg<Buffer<ffi::F32>>()  // weights [batch, next_n, H]
                                  .Arg<Buffer<ffi::U8>>()   // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()  // table physical [rows, C]
                                  .Arg<Buffer<ffi::S32>>()  // table blocks [rows, C]
                                  .Arg<Buffer<ffi::S32>>()  // valid_lens [rows], <= C * 8
                                  .Ret<Buffer<ffi::S32>>()  // out [rows, k] positions
                                  .Ret<Buffer<ffi::F32>>()  // logits workspace [rows, C * 8]
                                  .Ret<Buffer<ffi::S32>>()  // columns workspace [rows, k]
                                  .Attr<int32_t>("k")
                                  .Attr<int32_t>("select")
                                  .Attr<int32_t>("block_size"),
                              kCmdBuffer);

}  // namespace dsv41
