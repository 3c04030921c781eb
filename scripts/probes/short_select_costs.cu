// What the short-row select's steps cost on one CTA of 1024 threads holding 16 keys each (the
// budget of a ~5 us select): each step repeated inside one kernel and timed with clock64 by
// thread 0 between barriers, in ns at the SM clock measured against %globaltimer; and, by
// events over 20 back-to-back launches, the launch floor of an empty kernel of that shape and
// of a kernel that only loads the row. Scores: standard normal, lengths n, L2-resident.
// Build: nvcc -O3 -std=c++20 -arch=sm_90a -Icuda scripts/probes/short_select_costs.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "smxx_block_scan.cuh"

using namespace dsv41;
constexpr int kThreads = 1024, kPer = 16, kBins = 2048, kReps = 16;

struct Costs {
  long long cycles[8];
  unsigned long long ns, clk;
};

__device__ __forceinline__ uint32_t Key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kThreads, 1) Empty() {}

// Loads the row's 16 keys per thread (the select's first phase) and nothing else.
__global__ void __launch_bounds__(kThreads, 1)
    LoadOnly(const float* s, const int* lens, int* sink) {
  const int len = lens[blockIdx.x];
  const float4* p = reinterpret_cast<const float4*>(s + int64_t(blockIdx.x) * 16384) + threadIdx.x;
  uint32_t acc = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float4 x = p[j * kThreads];
    acc += Key(x.x) ^ Key(x.y) ^ Key(x.z) ^ Key(x.w);
  }
  if (acc == uint32_t(len)) sink[0] = 1;  // keeps the loads
}

__global__ void __launch_bounds__(kThreads, 1) Steps(const float* s, const int* lens, Costs* out) {
  __shared__ uint32_t hist[kBins];
  __shared__ int32_t warp_sums[32], total;
  const int tid = threadIdx.x;
  long long c0, c[8] = {};
  const unsigned long long g0 = Now();
  const long long k0 = clock64();
  // 0: the length, then 16 keys whose loads wait for it (the select's order), then a barrier
  c0 = clock64();
  const int len = lens[0];
  uint32_t key[kPer];
  {
    const float4* p = reinterpret_cast<const float4*>(s) + (tid * 4 < len ? tid : 0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = p[j * kThreads];
      key[4 * j] = Key(x.x), key[4 * j + 1] = Key(x.y), key[4 * j + 2] = Key(x.z),
              key[4 * j + 3] = Key(x.w);
    }
  }
  __syncthreads();
  c[0] = clock64() - c0;
  // 1: 16 keys again, loads issued with the length's load (no dependency)
  c0 = clock64();
  {
    const int len2 = lens[1];
    const float4* p = reinterpret_cast<const float4*>(s + 16384) + tid;
    uint32_t k2[kPer];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = p[j * kThreads];
      k2[4 * j] = Key(x.x), k2[4 * j + 1] = Key(x.y), k2[4 * j + 2] = Key(x.z),
             k2[4 * j + 3] = Key(x.w);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) key[i] ^= (k2[i] & uint32_t(len2 < 0));
  }
  __syncthreads();
  c[1] = clock64() - c0;
  // 2: one histogram pass of the first digit (11 bits) over normal keys, atomics + barrier
  // 3: the same over uniformly spread digits
  for (int mode = 0; mode < 2; ++mode) {
    long long sum = 0;
    for (int r = 0; r < kReps; ++r) {
      for (int i = tid; i < kBins; i += kThreads) hist[i] = 0;
      __syncthreads();
      c0 = clock64();
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const uint32_t k = mode == 0 ? key[i] : key[i] * 2654435761u;
        atomicAdd(&hist[k >> 21], 1u);
      }
      __syncthreads();
      sum += clock64() - c0;
    }
    c[2 + mode] = sum / kReps;
  }
  // 4: a barrier
  c0 = clock64();
  for (int r = 0; r < 64; ++r) __syncthreads();
  c[4] = (clock64() - c0) / 64;
  // 5: a block scan (three barriers)
  int32_t v = int32_t(hist[tid] + hist[tid + 1024]);
  c0 = clock64();
  for (int r = 0; r < kReps; ++r) v = BlockExclusiveScan<kThreads>(v & 7, warp_sums, &total);
  c[5] = (clock64() - c0) / kReps;
  // 6: a warp scan
  c0 = clock64();
  for (int r = 0; r < 64; ++r) v = WarpInclusiveScan(v & 7);
  c[6] = (clock64() - c0) / 64;
  // 7: the select's digit decision: two digits read, a block scan, the bin found, a barrier
  c0 = clock64();
  for (int r = 0; r < kReps; ++r) {
    const int32_t a = int32_t(hist[2047 - 2 * tid]), b = int32_t(hist[2046 - 2 * tid]);
    const int32_t above = BlockExclusiveScan<kThreads>(a + b, warp_sums, &total);
    if (above < 512 && 512 <= above + a + b) warp_sums[0] = 2047 - 2 * tid;
    __syncthreads();
    v += warp_sums[0];
  }
  c[7] = (clock64() - c0) / kReps;
  if (tid == 0) {
    for (int i = 0; i < 8; ++i) out->cycles[i] = c[i];
    out->clk = clock64() - k0, out->ns = Now() - g0;
  }
  if (v == 123456789 && key[0] == 1) out->cycles[0] = 0;  // keeps the work
}

template <class F>
float PerLaunchUs(F launch) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < 20; ++i) launch();
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  return ms * 1000 / 20;
}

int main() {
  const int rows = 8, n = 16384;
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  std::vector<float> h(rows * n);
  for (float& x : h) x = normal(gen);
  std::vector<int> lens(rows, n);
  float* s;
  int *d_lens, *sink;
  Costs* costs;
  cudaMalloc(&s, h.size() * 4), cudaMalloc(&d_lens, rows * 4), cudaMalloc(&sink, 4);
  cudaMalloc(&costs, sizeof(Costs));
  cudaMemcpy(s, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_lens, lens.data(), rows * 4, cudaMemcpyHostToDevice);
  cudaFuncSetAttribute(Empty, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10);
  for (int grid : {1, 8}) {
    printf("TIME empty kernel, %d CTA(s) of 1024, no smem: %.2f us per launch\n", grid,
           PerLaunchUs([&] { Empty<<<grid, kThreads>>>(); }));
    printf("TIME empty kernel, %d CTA(s) of 1024, 50 KB smem: %.2f us per launch\n", grid,
           PerLaunchUs([&] { Empty<<<grid, kThreads, 50 << 10>>>(); }));
    printf("TIME load-only kernel, %d row(s) of 16K: %.2f us per launch\n", grid,
           PerLaunchUs([&] { LoadOnly<<<grid, kThreads>>>(s, d_lens, sink); }));
  }
  const char* what[8] = {"length then 16 keys (dependent) + barrier",
                         "16 keys issued with the length + barrier",
                         "histogram pass, normal keys (16 atomics + barrier)",
                         "histogram pass, spread digits (16 atomics + barrier)",
                         "__syncthreads",
                         "BlockExclusiveScan (3 barriers)",
                         "WarpInclusiveScan",
                         "digit decision (2 reads, block scan, bin, barrier)"};
  for (int rep = 0; rep < 3; ++rep) {
    Steps<<<1, kThreads>>>(s, d_lens, costs);
    Costs c;
    cudaMemcpy(&c, costs, sizeof(c), cudaMemcpyDeviceToHost);
    const double ns_per_clk = double(c.ns) / double(c.clk);
    for (int i = 0; i < 8; ++i)
      printf("TIME rep %d %s: %lld cycles = %.0f ns\n", rep, what[i], c.cycles[i],
             c.cycles[i] * ns_per_clk);
  }
  printf("OK %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
