#include "smxx_ragged_rows.cuh"

#include <cuda_bf16.h>

#include <cmath>

#include "smxx_launch.cuh"

namespace dsv41 {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ T NegativeInfinity();
template <>
__device__ float NegativeInfinity<float>() {
  return -INFINITY;
}
template <>
__device__ __nv_bfloat16 NegativeInfinity<__nv_bfloat16>() {
  return __float2bfloat16(-INFINITY);
}

// One block per row: its range into the workspace, then -inf past the row's keys.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PrepareRaggedRowsKernel(T* logits, int64_t cols, const int32_t* starts, const int32_t* ends,
                            int64_t rows, int64_t rows_padded, uint32_t* ranges) {
  const int64_t row = blockIdx.x;
  const int64_t src = row < rows ? row : rows - 1;
  const int64_t s = min(max(int64_t(starts[src]), int64_t(0)), cols);
  const int64_t e = row < rows ? min(max(int64_t(ends[src]), s), cols) : s;
  if (threadIdx.x == 0) {
    ranges[row] = uint32_t(s);
    ranges[rows_padded + row] = uint32_t(e);
  }
  if (row >= rows) return;
  T* out = logits + row * cols;
  const T fill = NegativeInfinity<T>();
  for (int64_t c = (e - s) + threadIdx.x; c < cols; c += kThreads) out[c] = fill;
}

}  // namespace

template <typename T>
cudaError_t LaunchPrepareRaggedRows(cudaStream_t stream, T* logits, int64_t cols,
                                    const int32_t* starts, const int32_t* ends, int64_t rows,
                                    int64_t rows_padded, uint32_t* ranges) {
  return LaunchKernel(PrepareRaggedRowsKernel<T>, dim3(unsigned(rows_padded)), dim3(kThreads), 0,
                      stream, 0, logits, cols, starts, ends, rows, rows_padded, ranges);
}

template cudaError_t LaunchPrepareRaggedRows<float>(cudaStream_t, float*, int64_t, const int32_t*,
                                                    const int32_t*, int64_t, int64_t, uint32_t*);
template cudaError_t LaunchPrepareRaggedRows<__nv_bfloat16>(cudaStream_t, __nv_bfloat16*, int64_t,
                                                            const int32_t*, const int32_t*, int64_t,
                                                            int64_t, uint32_t*);

}  // namespace dsv41
