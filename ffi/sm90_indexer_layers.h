// The fused SM90 indexer layers as checked plans and their launches. The per-layer custom calls
// (sm90_indexer_layers.cu) build and launch these plans, which run the same kernels on the same
// data as the ops called one by one: the paged logits, the exact select, block scores, the top-C
// blocks, the candidate table, the sparse logits.
#pragma once

#include <cstdint>

#include "common.h"
#include "sm90_paged_mqa_logits.h"
#include "sm90_sparse_logits.h"
#include "smxx_short_topk.cuh"
#include "topk.h"

namespace dsv41 {

// Every plan's buffers are XLA's; a plan only names them. `lens` are the requests' lengths
// clamped to the page table, `row_lens` the query rows' (next_n rows a request); `out` is the
// layer's [rows, k] top-k (its caller checks that buffer's shape).

// A layer's top-k over its dense logits, inside `members`' blocks when `members` is not null.
struct DensePlan {
  Sm90PagedLogits call;
  const int32_t* lens;
  const int32_t* row_lens;
  const int32_t* members;  // [rows, num_members] block ids, or null
  int64_t num_members;
  int32_t* out;  // [rows, k]
  // The top-k's split-rows workspace (TopkArgs::workspace): the filter select splits its rows
  // where it holds kFilterSplitRowWords words a row.
  uint32_t* split;
  int64_t split_words;
  Select select;
  int32_t k, block_size;
};

// InvalidArgument (naming `op`) unless `out` is [rows, k].
ffi::Error CheckOut(const char* op, const Buffer<ffi::S32>& out, int64_t rows, int32_t k);

ffi::ErrorOr<DensePlan> DensePlanOf(const char* op, const ffi::AnyBuffer& q,
                                    const Buffer<ffi::F32>& weights, const Buffer<ffi::U8>& kv,
                                    const Buffer<ffi::S32>& lens, const Buffer<ffi::S32>& row_lens,
                                    const Buffer<ffi::S32>& block_table,
                                    const Buffer<ffi::S32>* members, int32_t* out,
                                    const Buffer<ffi::F32>& logits, const Buffer<ffi::U32>& split,
                                    int32_t k, int32_t select, int32_t block_size);

// The candidate source layer: its top-k, then the published table (blocks, count, valid_lens,
// physical). When `all_blocks` (every row has at most C blocks) the table is every block of each
// row: no block scores, no top-C.
struct PublishPlan {
  DensePlan topk;
  const int32_t* row_block_table;  // [rows, max_pages]
  int32_t *blocks, *count, *valid_lens, *physical;
  float* block_scores;  // [rows, nb] workspace
  int32_t* selected;    // [rows, C] workspace
  int64_t c, nb, row_table_width;
  Select select_c;
  int32_t page_size;
  bool all_blocks;
};

struct PublishTable {
  const Buffer<ffi::S32>& blocks;
  const Buffer<ffi::S32>& count;
  const Buffer<ffi::S32>& valid_lens;
  const Buffer<ffi::S32>& physical;
};

ffi::ErrorOr<PublishPlan> PublishPlanOf(
    const char* op, const ffi::AnyBuffer& q, const Buffer<ffi::F32>& weights,
    const Buffer<ffi::U8>& kv, const Buffer<ffi::S32>& lens, const Buffer<ffi::S32>& row_lens,
    const Buffer<ffi::S32>& block_table, const Buffer<ffi::S32>& row_block_table, int32_t* out,
    const PublishTable& table, const Buffer<ffi::F32>& logits, const Buffer<ffi::F32>& block_scores,
    const Buffer<ffi::S32>& selected, const Buffer<ffi::U32>& split, int32_t k, int32_t select,
    int32_t select_c, int32_t block_size, int32_t page_size, bool all_blocks);

// A consumer's top-k over its candidate blocks only: the sparse logits kernel scores the blocks
// where they lie in the paged cache (sm90_sparse_logits.h), the select runs over those columns,
// the chosen columns map back to positions.
struct SparsePlan {
  Sm90SparseLogits call;
  const int32_t* blocks;
  int32_t *columns, *out;
  Select select;  // the select after the logits, unless onchip
  bool onchip;    // the one-kernel select (sm90_sparse_select.h): no logits or columns written
  int32_t k, block_size;
};

ffi::ErrorOr<SparsePlan> SparsePlanOf(
    const char* op, const ffi::AnyBuffer& q, const Buffer<ffi::F32>& weights,
    const Buffer<ffi::U8>& kv, const Buffer<ffi::S32>& physical, const Buffer<ffi::S32>& blocks,
    const Buffer<ffi::S32>& valid_lens, int32_t* out, const Buffer<ffi::F32>& logits,
    const Buffer<ffi::S32>& columns, int32_t k, int32_t select, int32_t block_size);

// The launches, dense and publish with DeepGEMM's schedule over the requests' lengths. Nothing
// to launch for zero rows. `outputs`: what the dense top-k, the short select, writes beside it
// (the publish's block scores or table of every block), or nullptr.
ffi::Error LaunchDense(const char* op, cudaStream_t stream, const DensePlan& plan,
                       const int32_t* schedule, const ShortOutputs* outputs = nullptr);
ffi::Error LaunchPublish(const char* op, cudaStream_t stream, const PublishPlan& plan,
                         const int32_t* schedule);
ffi::Error LaunchSparse(const char* op, cudaStream_t stream, const SparsePlan& plan);

}  // namespace dsv41
