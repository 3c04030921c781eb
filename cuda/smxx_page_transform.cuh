// Page-table transforms of selected positions (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// out[r, i] = block_table[r, p / P] * P + p % P for p = indices[r, i] >= 0 on a valid page,
// else -1.
void LaunchLogicalToPhysical(const int32_t* indices, const int32_t* block_table, int32_t* out,
                             int64_t rows, int64_t k, int64_t max_pages, int32_t page_size,
                             cudaStream_t stream);

}  // namespace dsv41
