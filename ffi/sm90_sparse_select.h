// The SM90 sparse consumer in one kernel: each query row's logits over its candidate blocks,
// scored from the paged fp8 cache and kept in shared memory, then its exact top-k on chip
// (cuda/smxx_onchip_select.cuh), written as positions. Used by the fused sparse layers
// (sm90_indexer_layers.cu) when the plan's select is Select::kOnChip.
#pragma once

#include <cstdint>

#include "sm90_sparse_logits.h"

namespace dsv41 {

// The `select` attribute of the sparse layers that runs this kernel (0-2 name the three selects
// of the logits-then-select path, ffi/topk.h).
inline constexpr int32_t kSelectOnChip = 3;

// The widest sparse row the kernel takes: rank 0 of its cluster holds every column's key.
int64_t SparseSelectMaxColumns();

// CTAs a row the kernel runs for `rows` rows of `c` candidate blocks on the current device (0
// when it cannot take them or the device was not prepared).
int32_t SparseSelectClusterSize(int64_t rows, int64_t c);

// out[r, 0, k) = the positions blocks[r, j / 8] * 8 + j % 8 of the k best columns j <
// valid_lens[r] of row r's logits (the same logits, bitwise, as LaunchSm90SparseLogits'), ties
// by lower column, NaN never, -1 past the columns there are; in column order. `call.logits` is
// not written. InvalidArgument for rows wider than SparseSelectMaxColumns().
ffi::Error LaunchSm90SparseSelect(const char* op, cudaStream_t stream, const Sm90SparseLogits& call,
                                  const int32_t* blocks, int32_t k, int32_t* out);

// Kernel attributes and device facts (SM count, clusters that fit), once per device.
cudaError_t PrepareSparseSelectSm90();

}  // namespace dsv41
