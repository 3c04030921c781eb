// Gather of published candidate blocks into a compact FP8 cache (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// Token rows of the FP8 index cache (DeepGEMM's page layout): 128 e4m3 values + one fp32 scale.
inline constexpr int64_t kGatherHeadDim = 128;
inline constexpr int64_t kGatherPageSize = 64;
inline constexpr int64_t kGatherBlockSize = 8;  // the candidate block: 1 KiB of values, 32 B of scales

// For row r and table column j (< candidates), copy the 8 tokens of cache slot-block
// `physical[r, j]` (slot // 8) into compact page `r * candidates / 8 + j / 8` at offset
// `(j % 8) * 8`, in the same page layout. Columns whose block is padding (-1) or lies outside
// [0, num_pages) get zero values and NaN scales, so any logit read from them is NaN.
void LaunchGatherCandidateBlocks(const uint8_t* cache, int64_t num_pages, const int32_t* physical,
                                 int64_t rows, int64_t candidates, uint8_t* out,
                                 cudaStream_t stream);

}  // namespace dsv41
