// Block-level steps of the fused indexer layers (any SM): a step's per-row lengths and tables,
// block scores of a logits row and the sparse row's columns mapped back to positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// out[r, b] (b < nb, row stride nb) = the max of scores[r, p] over the visible (p < lens[r]),
// non-NaN positions p of block b (B = block_size positions); -inf for a block with none of them
// and for every block at or past ceil(lens[r] / B); +inf for the newest block ceil(lens[r] / B)
// - 1 when `pin_newest`. lens are clamped to [0, n]; scores has row stride `stride` >= n.
void LaunchBlockAmax(const float* scores, int64_t stride, int64_t n, const int32_t* lens,
                     int64_t rows, int32_t block_size, bool pin_newest, float* out, int64_t nb,
                     cudaStream_t stream);

// out[r, i] = blocks[r, col / B] * B + col % B for col = columns[r, i] in [0, c * B), else -1
// (B = block_size; blocks [rows, c] ascending, so ascending columns stay ascending).
void LaunchColumnsToPositions(const int32_t* columns, const int32_t* blocks, int64_t rows,
                              int64_t k, int64_t c, int32_t block_size, int32_t* out,
                              cudaStream_t stream);

}  // namespace dsv41
