// dsv41_sm90_decode_step        <-> DecodeStepSm90FFI        <-> dsv41_jax.fused.decode_step
// dsv41_sm90_decode_step_traced <-> DecodeStepTracedSm90FFI  <-> (the same, XLA-captured)
//
// Every indexer layer of one decode step as one custom call: the step's row lengths and tables
// (lengths clamped to the page table, each query row's length, the every-block table, the
// per-row page table), DeepGEMM's schedule, the candidate source layer (its top-k and the
// published table), then each consumer and plain layer, in that order, through the same plans as
// the per-layer calls (sm90_indexer_layers.h): the results are bitwise theirs. XLA sees one thunk a
// step and no kernel of its own; with `graphs` the launches replay as one cached CUDA graph
// (graph_cache.h), so a serving loop pays one graph launch a step. The `_traced` target is the
// same handler with XLA's command-buffer trait (XLA captures it, `graphs` off).
//
// Buffers, in order (one layer = q [b, n, h, 128] fp8, weights [b, n, h] f32, its cache):
//   args: context_lens [b] (any int32), block_table [b, P], then every layer's three, the
//         source layer first;
//   rets: blocks, count, valid_lens, physical (the table), every layer's out [rows, k] (one
//         [layers, rows, k] result when `stacked`, layer i at slot slots[i]), then the
//         workspaces: lens [b], row_lens [rows], all_selected [rows, C] (all_blocks), row page
//         table [rows, P] (next_n > 1), schedule [257, 2], logits [rows, cols], block scores
//         [rows, nb], selected [rows, C], sparse logits [rows, C * 8], columns [rows, k] (each
//         [1, ...] when unused), the top-k selects' split-rows workspace (uint32 words: the
//         filter select splits its rows where it holds LIMITS filter_split_row_words a row).
// `roles[i]` of layer i: 0 the source (layer 0 only), 1 dense, 2 mask (inside the table's
// blocks), 3 sparse; `selects[i]` its select.
#include <utility>
#include <vector>

#include "graph_cache.h"
#include "sm90_indexer_layers.h"
#include "smxx_block_ops.cuh"

namespace dsv41 {
namespace {

constexpr const char* kOp = "dsv41_sm90_decode_step";
constexpr size_t kArgsBefore = 2, kRetsBefore = 4, kWorkspaces = 11;
enum Role : int32_t { kSource = 0, kDense = 1, kMask = 2, kSparse = 3 };

GraphCache g_graphs;

struct Step {
  std::vector<Role> roles;
  PublishPlan source;
  std::vector<DensePlan> dense;    // dense and mask layers, in order
  std::vector<SparsePlan> sparse;  // sparse layers, in order
  const int32_t *context_lens, *block_table;
  int32_t *lens, *row_lens, *all_selected, *row_table, *schedule;
  int64_t batch, next_n, rows, capacity, c, max_pages;
  int32_t block_size;
};

template <class T>
ffi::ErrorOr<T> ArgAt(const ffi::RemainingArgs& args, size_t i) {
  auto a = args.get<T>(i);
  if (a.has_error()) return InvalidArgument(kOp, "argument " + std::to_string(i) + ": wrong type");
  return *a;
}

template <ffi::DataType T>
ffi::ErrorOr<Buffer<T>> RetAt(const ffi::RemainingRets& rets, size_t i) {
  auto r = rets.get<Buffer<T>>(i);
  if (r.has_error()) return InvalidArgument(kOp, "result " + std::to_string(i) + ": wrong type");
  return **r;
}

#define DSV41_TRY(name, expr)                          \
  auto name##_or = (expr);                             \
  if (name##_or.has_error()) return name##_or.error(); \
  auto& name = *name##_or

ffi::ErrorOr<Step> StepOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                          ffi::Span<const int32_t> roles, ffi::Span<const int32_t> selects,
                          int32_t k, int32_t select_c, int32_t block_size, int32_t page_size,
                          bool all_blocks, bool stacked, ffi::Span<const int32_t> slots) {
  const size_t layers = roles.size(), outs = stacked ? 1 : layers;
  if (layers == 0 || selects.size() != layers || roles[0] != kSource ||
      args.size() != kArgsBefore + 3 * layers || rets.size() != kRetsBefore + outs + kWorkspaces) {
    return InvalidArgument(kOp, "expected the source layer first, a select per layer and " +
                                    std::to_string(kArgsBefore) + " + 3 per layer arguments");
  }
  using S32 = Buffer<ffi::S32>;
  DSV41_TRY(context_lens, ArgAt<S32>(args, 0));
  DSV41_TRY(block_table, ArgAt<S32>(args, 1));
  DSV41_TRY(blocks, RetAt<ffi::S32>(rets, 0));
  DSV41_TRY(count, RetAt<ffi::S32>(rets, 1));
  DSV41_TRY(valid_lens, RetAt<ffi::S32>(rets, 2));
  DSV41_TRY(physical, RetAt<ffi::S32>(rets, 3));
  const size_t ws = kRetsBefore + outs;
  DSV41_TRY(lens, RetAt<ffi::S32>(rets, ws));
  DSV41_TRY(row_lens, RetAt<ffi::S32>(rets, ws + 1));
  DSV41_TRY(all_selected, RetAt<ffi::S32>(rets, ws + 2));
  DSV41_TRY(row_table, RetAt<ffi::S32>(rets, ws + 3));
  DSV41_TRY(schedule, RetAt<ffi::S32>(rets, ws + 4));
  DSV41_TRY(logits, RetAt<ffi::F32>(rets, ws + 5));
  DSV41_TRY(block_scores, RetAt<ffi::F32>(rets, ws + 6));
  DSV41_TRY(selected, RetAt<ffi::S32>(rets, ws + 7));
  DSV41_TRY(sparse_logits, RetAt<ffi::F32>(rets, ws + 8));
  DSV41_TRY(columns, RetAt<ffi::S32>(rets, ws + 9));
  DSV41_TRY(split, RetAt<ffi::U32>(rets, ws + 10));
  if (schedule.element_count() != 2 * kSm90ScheduleRows) {
    return InvalidArgument(kOp, "expected the schedule [257, 2]");
  }
  const auto bd = block_table.dimensions();
  if (bd.size() != 2 || lens.element_count() != context_lens.element_count() ||
      bd[0] != lens.element_count()) {
    return InvalidArgument(kOp, "expected context_lens [b], block_table [b, P], lens [b]");
  }
  DSV41_TRY(q0, ArgAt<ffi::AnyBuffer>(args, kArgsBefore));
  if (q0.dimensions().size() != 4) return InvalidArgument(kOp, "expected q [b, n, h, d]");
  const int64_t batch = bd[0], next_n = q0.dimensions()[1], rows = batch * next_n;
  if (next_n < 1 || row_lens.element_count() != rows) {
    return InvalidArgument(kOp, "expected row_lens [b * next_n]");
  }
  // The per-row page table is the request's own when a request has one row.
  const bool own_row_table = next_n > 1;
  if (own_row_table && row_table.element_count() != rows * bd[1]) {
    return InvalidArgument(kOp, "expected the row page table [rows, P]");
  }
  const S32& rows_table = own_row_table ? row_table : block_table;
  // Every layer's top-k: its own result, or its [rows, k] slice of the stacked one.
  std::vector<int32_t*> out_of(layers);
  std::vector<bool> taken(layers, false);
  if (stacked && slots.size() != layers) return InvalidArgument(kOp, "expected a slot per layer");
  for (size_t i = 0; i < layers; ++i) {
    const int64_t slot = stacked ? slots[i] : 0;
    if (stacked && (slot < 0 || slot >= int64_t(layers) || taken[slot])) {
      return InvalidArgument(kOp, "slots must order the layers");
    }
    if (stacked) taken[slot] = true;
    DSV41_TRY(out, RetAt<ffi::S32>(rets, kRetsBefore + (stacked ? 0 : i)));
    const auto od = out.dimensions();
    const bool ok = stacked
                        ? od.size() == 3 && od[0] == int64_t(layers) && od[1] == rows && od[2] == k
                        : od.size() == 2 && od[0] == rows && od[1] == k;
    if (!ok) {
      return InvalidArgument(kOp, "expected out [rows, k] a layer (stacked: [layers, rows, k])");
    }
    out_of[i] = out.typed_data() + slot * rows * k;
  }
  Step step;
  for (size_t i = 0; i < layers; ++i) {
    if (roles[i] < kSource || roles[i] > kSparse || (i > 0 && roles[i] == kSource)) {
      return InvalidArgument(kOp, "roles: 0 (layer 0 only), 1, 2 or 3");
    }
    step.roles.push_back(Role(roles[i]));
    DSV41_TRY(q, ArgAt<ffi::AnyBuffer>(args, kArgsBefore + 3 * i));
    DSV41_TRY(w, ArgAt<Buffer<ffi::F32>>(args, kArgsBefore + 3 * i + 1));
    DSV41_TRY(kv, ArgAt<Buffer<ffi::U8>>(args, kArgsBefore + 3 * i + 2));
    int32_t* out = out_of[i];
    if (roles[i] == kSource) {
      DSV41_TRY(plan, PublishPlanOf(kOp, q, w, kv, lens, row_lens, block_table, rows_table,
                                    all_selected, out, {blocks, count, valid_lens, physical},
                                    logits, block_scores, selected, split, k, selects[i], select_c,
                                    block_size, page_size, all_blocks));
      step.source = plan;
    } else if (roles[i] == kSparse) {
      DSV41_TRY(plan, SparsePlanOf(kOp, q, w, kv, physical, blocks, valid_lens, out, sparse_logits,
                                   columns, k, selects[i], block_size));
      step.sparse.push_back(plan);
    } else {
      DSV41_TRY(plan, DensePlanOf(kOp, q, w, kv, lens, row_lens, block_table,
                                  roles[i] == kMask ? &blocks : nullptr, out, logits, split, k,
                                  selects[i], block_size));
      if (plan.call.next_n != next_n) {
        return InvalidArgument(kOp, "every layer needs the same next_n");
      }
      step.dense.push_back(plan);
    }
  }
  step.batch = batch;
  step.next_n = next_n;
  step.rows = rows;
  step.capacity = bd[1] * int64_t(page_size);
  step.c = blocks.dimensions()[1];
  step.max_pages = bd[1];
  step.block_size = block_size;
  step.context_lens = context_lens.typed_data();
  step.block_table = block_table.typed_data();
  step.lens = lens.typed_data();
  step.row_lens = row_lens.typed_data();
  step.all_selected = all_blocks ? all_selected.typed_data() : nullptr;
  step.row_table = own_row_table ? row_table.typed_data() : nullptr;
  step.schedule = schedule.typed_data();
  return step;
}

#undef DSV41_TRY

ffi::Error Launch(const Step& s, cudaStream_t stream) {
  if (s.rows == 0) return ffi::Error::Success();
  LaunchStepRows(s.context_lens, s.batch, int32_t(s.next_n), s.capacity, s.lens, s.row_lens,
                 s.all_selected, s.c, s.block_size, s.block_table, s.max_pages, s.row_table,
                 stream);
  if (auto e = LastCudaError(kOp); e.failure()) return e;
  if (auto e = LaunchSm90Schedule(kOp, stream, s.batch, s.next_n, s.lens, s.schedule);
      e.failure()) {
    return e;
  }
  if (auto e = LaunchPublish(kOp, stream, s.source, s.schedule); e.failure()) return e;
  size_t dense = 0, sparse = 0;
  for (size_t i = 1; i < s.roles.size(); ++i) {
    const ffi::Error e = s.roles[i] == kSparse
                             ? LaunchSparse(kOp, stream, s.sparse[sparse++])
                             : LaunchDense(kOp, stream, s.dense[dense++], s.schedule);
    if (e.failure()) return e;
  }
  return ffi::Error::Success();
}

// Every attribute, dtype and dimension of the call's buffers (the layout) and every pointer:
// what the recorded launches depend on.
GraphCache::Key KeyOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                      std::initializer_list<int64_t> attrs, ffi::Span<const int32_t> roles,
                      ffi::Span<const int32_t> selects, ffi::Span<const int32_t> slots) {
  GraphCache::Key key;
  std::vector<int64_t>& layout = key.layout;
  layout.reserve(5 + attrs.size() + 2 * roles.size() + slots.size() +
                 5 * (args.size() + rets.size()));
  // The counts first, so no two calls' words run together into one key.
  for (size_t n : {roles.size(), selects.size(), slots.size(), args.size(), rets.size()}) {
    layout.push_back(int64_t(n));
  }
  layout.insert(layout.end(), attrs.begin(), attrs.end());
  layout.insert(layout.end(), roles.begin(), roles.end());
  layout.insert(layout.end(), selects.begin(), selects.end());
  layout.insert(layout.end(), slots.begin(), slots.end());
  key.pointers.reserve(args.size() + rets.size());
  auto add = [&key](const auto& b) {
    key.pointers.push_back(reinterpret_cast<int64_t>(b.untyped_data()));
    key.layout.push_back(static_cast<int64_t>(b.element_type()));
    key.layout.push_back(static_cast<int64_t>(b.dimensions().size()));
    for (int64_t d : b.dimensions()) key.layout.push_back(d);
  };
  for (size_t i = 0; i < args.size(); ++i) add(*args.get<ffi::AnyBuffer>(i));
  for (size_t i = 0; i < rets.size(); ++i) add(**rets.get<ffi::AnyBuffer>(i));
  return key;
}

ffi::Error DecodeStep(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      ffi::Span<const int32_t> roles, ffi::Span<const int32_t> selects, int32_t k,
                      int32_t select_c, int32_t block_size, int32_t page_size, bool all_blocks,
                      bool stacked, ffi::Span<const int32_t> slots, bool graphs) {
  auto run = [&](cudaStream_t s) {
    auto step = StepOf(args, rets, roles, selects, k, select_c, block_size, page_size, all_blocks,
                       stacked, slots);
    if (step.has_error()) return step.error();
    return Launch(*step, s);
  };
  if (!graphs) return run(stream);
  // The key holds everything the plans are built from, so a hit replays a checked plan.
  const GraphCache::Key key = KeyOf(
      args, rets, {k, select_c, block_size, page_size, all_blocks, stacked}, roles, selects, slots);
  return g_graphs.Run(kOp, stream, key, run);
}

ffi::Error DecodeStepTraced(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                            ffi::Span<const int32_t> roles, ffi::Span<const int32_t> selects,
                            int32_t k, int32_t select_c, int32_t block_size, int32_t page_size,
                            bool all_blocks, bool stacked, ffi::Span<const int32_t> slots,
                            bool graphs) {
  if (graphs) return InvalidArgument(kOp, "the XLA-captured step takes graphs=False");
  return DecodeStep(stream, args, rets, roles, selects, k, select_c, block_size, page_size,
                    all_blocks, stacked, slots, false);
}

auto Binding() {
  return ffi::Ffi::Bind()
      .Ctx<Stream>()
      .RemainingArgs()
      .RemainingRets()
      .Attr<ffi::Span<const int32_t>>("roles")
      .Attr<ffi::Span<const int32_t>>("selects")
      .Attr<int32_t>("k")
      .Attr<int32_t>("select_c")
      .Attr<int32_t>("block_size")
      .Attr<int32_t>("page_size")
      .Attr<bool>("all_blocks")
      .Attr<bool>("stacked")
      .Attr<ffi::Span<const int32_t>>("slots")
      .Attr<bool>("graphs");
}

}  // namespace

std::pair<int64_t, int64_t> DecodeStepGraphStats() {
  const GraphCache::Stats stats = g_graphs.CurrentStats();
  return {stats.hits, stats.misses};
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(DecodeStepSm90FFI, DecodeStep, Binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(DecodeStepTracedSm90FFI, DecodeStepTraced, Binding(), kCmdBuffer);

}  // namespace dsv41
