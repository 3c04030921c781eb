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

// Paged logits [batch * next_n, stride]: the visible positions of row (b, j) (lens[b] - next_n
// + 1 + j of them) on a page id outside [0, num_pages) become NaN, as the contract says, so
// nothing selects them (a kernel reading such a page through TMA sees its zero fill).
void LaunchMarkInvalidPages(float* logits, int64_t stride, const int32_t* lens,
                            const int32_t* block_table, int64_t batch, int64_t max_pages,
                            int64_t num_pages, int32_t next_n, int32_t page_size,
                            cudaStream_t stream);

}  // namespace dsv41
