// How fast the GPU reads what the sparse logits kernel reads: each row's candidate blocks, 1 KiB
// of values and 32 B of scales a block, scattered over a paged fp8 cache (8448-byte pages of 64
// tokens), against a contiguous read of the same bytes. The byte floor of the sparse consumer
// assumes streaming bandwidth; this says what scattered 1 KiB runs reach.
// Shapes: rows x 2048 blocks (C = 2048, a random 1-in-8 subset of each row's own 16384 blocks,
// ascending, as publish gives), rows 8 and 64. Plain loads, 16 B a lane, many blocks in flight
// per warp; kernel time by CUDA events, medians of 21.
//   nvcc -O3 -std=c++20 -arch=sm_90a scattered_reads.cu && ./a.out
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

constexpr int64_t kPageBytes = 64 * 132, kValues = 64 * 128, kBlocksPerPage = 8;
constexpr int kC = 2048, kRowBlocks = 16384, kThreads = 256, kPerWarp = 4;

// One warp reads kPerWarp blocks: 64 lanes-worth of 16 B values (two loads a lane) and the
// block's 32 B of scales (two lanes), all issued before any is used.
__global__ void __launch_bounds__(kThreads)
    Scattered(const uint8_t* cache, const int32_t* slots, int64_t total, uint32_t* sink) {
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  uint4 v[kPerWarp][2];
  uint4 s[kPerWarp];
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int64_t b = warp * kPerWarp + i;
    v[i][0] = v[i][1] = s[i] = make_uint4(0, 0, 0, 0);
    if (b < total) {
      const int32_t slot = slots[b];
      const uint8_t* page = cache + int64_t(slot / kBlocksPerPage) * kPageBytes;
      const int64_t token = int64_t(slot % kBlocksPerPage) * 8;
      const uint4* values = reinterpret_cast<const uint4*>(page + token * 128);
      v[i][0] = values[lane];
      v[i][1] = values[lane + 32];
      if (lane < 2) s[i] = reinterpret_cast<const uint4*>(page + kValues + token * 4)[lane];
    }
  }
  uint32_t x = 0;
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    x ^= v[i][0].x ^ v[i][0].w ^ v[i][1].y ^ v[i][1].z ^ s[i].x ^ s[i].w;
  }
  if (x == 0x12345678u) sink[0] = x;  // keeps the loads
}

// The same bytes read contiguously, 16 B a thread.
__global__ void __launch_bounds__(kThreads)
    Streaming(const uint4* data, int64_t n, uint32_t* sink) {
  uint32_t x = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    const uint4 v = data[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x12345678u) sink[0] = x;
}

template <class Launch>
static float MedianUs(Launch launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < 24; ++r) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 3) t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  std::mt19937 gen(7);
  for (int rows : {8, 64}) {
    const int64_t pages = int64_t(rows) * kRowBlocks / kBlocksPerPage;
    uint8_t* cache = nullptr;
    uint32_t* sink = nullptr;
    int32_t* slots_d = nullptr;
    if (cudaMalloc(&cache, pages * kPageBytes) != cudaSuccess) return 1;
    cudaMemset(cache, 1, pages * kPageBytes);
    cudaMalloc(&sink, 4);
    // Each row's pages shuffled over the cache; its C blocks a random ascending subset.
    std::vector<int32_t> perm(pages), slots;
    for (int64_t p = 0; p < pages; ++p) perm[p] = int32_t(p);
    std::shuffle(perm.begin(), perm.end(), gen);
    std::vector<int32_t> pick(kRowBlocks);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < kRowBlocks; ++i) pick[i] = i;
      std::shuffle(pick.begin(), pick.end(), gen);
      std::sort(pick.begin(), pick.begin() + kC);
      for (int i = 0; i < kC; ++i) {
        const int32_t logical = pick[i];
        const int32_t page =
            perm[int64_t(r) * (kRowBlocks / kBlocksPerPage) + logical / kBlocksPerPage];
        slots.push_back(page * int32_t(kBlocksPerPage) + logical % kBlocksPerPage);
      }
    }
    cudaMalloc(&slots_d, slots.size() * 4);
    cudaMemcpy(slots_d, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice);
    const int64_t total = int64_t(slots.size());
    const double bytes = double(total) * (1024 + 32);
    const int64_t warps = (total + kPerWarp - 1) / kPerWarp;
    const unsigned ctas = unsigned((warps * 32 + kThreads - 1) / kThreads);
    const float scattered =
        MedianUs([&] { Scattered<<<ctas, kThreads>>>(cache, slots_d, total, sink); });
    const int64_t vecs = int64_t(bytes) / 16;
    const float streaming = MedianUs([&] {
      Streaming<<<132 * 8, kThreads>>>(reinterpret_cast<const uint4*>(cache), vecs, sink);
    });
    const cudaError_t err = cudaDeviceSynchronize();
    std::printf(
        "TIME rows %d: %lld blocks, %.1f MB: scattered %.1f us (%.2f TB/s), contiguous %.1f us "
        "(%.2f TB/s) %s\n",
        rows, (long long)total, bytes / 1e6, scattered, bytes / scattered / 1e6, streaming,
        bytes / streaming / 1e6, err == cudaSuccess ? "OK" : cudaGetErrorString(err));
    cudaFree(cache);
    cudaFree(sink);
    cudaFree(slots_d);
  }
  return 0;
}
