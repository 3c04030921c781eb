// Ragged (prefill) logits rows: clamp each row's key range and define every column the logits
// kernels do not write. Shared by the SM90 and SM100 ragged logits handlers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// The most query rows per block of the ragged logits kernels (128 (row, head) pairs / 32 heads):
// the ranges workspace holds 2 x (rows + this) entries, enough for the rows rounded up to a whole
// block.
inline constexpr int64_t kMqaRowPadding = 4;

// DeepGEMM's ragged logits kernels trust their ranges and write column kv - ks of row r for
// every kv in [ks, ke): this clamps them to 0 <= ks <= ke <= cols into `ranges` (ks at
// [0, rows_padded), ke at [rows_padded, 2 rows_padded)), writes -inf at columns
// [ke - ks, cols) of each real row, and gives the rows past `rows` (the last query block is
// whole) an empty range at the last row's start, so they widen no block's key range and are
// never written. Needs rows >= 1.
template <typename T>
cudaError_t LaunchPrepareRaggedRows(cudaStream_t stream, T* logits, int64_t cols,
                                    const int32_t* starts, const int32_t* ends, int64_t rows,
                                    int64_t rows_padded, uint32_t* ranges);

}  // namespace dsv41
