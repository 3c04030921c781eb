#include "smxx_page_transform.cuh"
#include "smxx_launch.cuh"

#include <cmath>

namespace dsv41 {
namespace {

__global__ void LogicalToPhysicalKernel(const int32_t* __restrict__ indices,
                                        const int32_t* __restrict__ block_table,
                                        int32_t* __restrict__ out, int64_t n, int64_t k,
                                        int64_t max_pages, int32_t page_size) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t p = indices[i];
    int32_t result = -1;
    if (p >= 0 && p / page_size < max_pages) {  // never index past the row's page table
      const int32_t page = block_table[(i / k) * max_pages + p / page_size];
      if (page >= 0) result = page * page_size + p % page_size;
    }
    out[i] = result;
  }
}

// One thread per (row, page): the page-table reads are all in flight at once (a loop per row
// was latency-bound: ~56 us at 1M positions).
constexpr int kMarkThreads = 256;

__global__ void __launch_bounds__(kMarkThreads) MarkInvalidPagesKernel(
    float* logits, int64_t stride, const int32_t* lens, const int32_t* block_table,
    int64_t max_pages, int64_t num_pages, int32_t next_n, int32_t page_size) {
  const int64_t row = blockIdx.y, b = row / next_n, j = row % next_n;
  const int64_t c = int64_t(blockIdx.x) * kMarkThreads + threadIdx.x;
  const int64_t visible = int64_t(lens[b]) - next_n + 1 + j;
  const int64_t len = visible > 0 ? visible : 0;
  if (c >= max_pages || c * page_size >= len) return;
  const int32_t page = block_table[b * max_pages + c];
  if (page >= 0 && page < num_pages) return;
  const int64_t end = (c + 1) * page_size < len ? (c + 1) * page_size : len;
  for (int64_t t = c * page_size; t < end; ++t) logits[row * stride + t] = NAN;
}

}  // namespace

void LaunchLogicalToPhysical(const int32_t* indices, const int32_t* block_table, int32_t* out,
                             int64_t rows, int64_t k, int64_t max_pages, int32_t page_size,
                             cudaStream_t stream) {
  const int64_t n = rows * k;
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  LaunchKernel(LogicalToPhysicalKernel, dim3(unsigned(blocks < 65535 ? blocks : 65535)),
               dim3(threads), 0, stream, 0, indices, block_table, out, n, k, max_pages,
               page_size);
}

void LaunchMarkInvalidPages(float* logits, int64_t stride, const int32_t* lens,
                            const int32_t* block_table, int64_t batch, int64_t max_pages,
                            int64_t num_pages, int32_t next_n, int32_t page_size,
                            cudaStream_t stream) {
  if (batch == 0 || max_pages == 0) return;
  const dim3 grid(unsigned((max_pages + kMarkThreads - 1) / kMarkThreads),
                  unsigned(batch * next_n));
  LaunchKernel(MarkInvalidPagesKernel, grid, dim3(kMarkThreads), 0, stream, 0, logits, stride,
               lens, block_table, max_pages, num_pages, next_n, page_size);
}

}  // namespace dsv41
