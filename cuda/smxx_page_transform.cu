#include "smxx_launch.cuh"
#include "smxx_page_transform.cuh"

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

}  // namespace

void LaunchLogicalToPhysical(const int32_t* indices, const int32_t* block_table, int32_t* out,
                             int64_t rows, int64_t k, int64_t max_pages, int32_t page_size,
                             cudaStream_t stream) {
  const int64_t n = rows * k;
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  LaunchKernel(LogicalToPhysicalKernel, dim3(unsigned(blocks < 65535 ? blocks : 65535)),
               dim3(threads), 0, stream, 0, indices, block_table, out, n, k, max_pages, page_size);
}

}  // namespace dsv41
