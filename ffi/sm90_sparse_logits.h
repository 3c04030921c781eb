// The SM90 sparse logits: each query row's logits over its published candidate blocks only,
// read straight from the paged fp8 cache (no gather, no compact cache), bitwise DeepGEMM's dense
// SM90 logits at the same positions. Shared by its own custom call and the fused sparse layers
// (sm90_indexer_layers.cu).
#pragma once

#include <cstdint>

#include "common.h"

namespace dsv41 {

// One call: fp8 q [batch, next_n, heads, 128] (one query row = one request row), weights
// [batch, next_n, heads], the cache [num_pages, 64, 1, 132], physical [rows, c] (cache slot
// blocks: page·8 + block of 8 tokens; -1 padding), valid_lens [rows], logits [rows, c·8].
struct Sm90SparseLogits {
  const void* q;
  const float* weights;
  const uint8_t* kv;
  const int32_t* physical;
  const int32_t* valid_lens;
  float* logits;
  int64_t rows, heads, num_pages, c;
};

// Rows of one call: one grid row each (gridDim.y).
inline constexpr int64_t kSm90SparseMaxRows = 65535;

// The call over these buffers, or InvalidArgument (naming `op`) for shapes the kernel lacks:
// 32 or 64 heads, head_dim 128, 64-token pages, c a positive multiple of 8, at most
// kSm90SparseMaxRows rows.
ffi::ErrorOr<Sm90SparseLogits> Sm90SparseLogitsOf(const char* op, const ffi::AnyBuffer& q,
                                                  const Buffer<ffi::F32>& weights,
                                                  const Buffer<ffi::U8>& kv,
                                                  const Buffer<ffi::S32>& physical,
                                                  const Buffer<ffi::S32>& valid_lens,
                                                  const Buffer<ffi::F32>& logits);

// Writes logits[r, j] for every column j of the 64-column tiles that start below valid_lens[r]
// (clamped to [0, c·8]); later columns are left unwritten. Blocks with a slot < 0 or on a page
// outside the cache read nothing: their logits are NaN.
ffi::Error LaunchSm90SparseLogits(const char* op, cudaStream_t stream,
                                  const Sm90SparseLogits& call);

// Kernel attributes and the SM count, once per device before any call.
cudaError_t PrepareSparseLogitsSm90();

}  // namespace dsv41
