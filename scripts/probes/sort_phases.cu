// Where does the candidate sort's time go? The production kernel's phases, stamped with
// %globaltimer by thread 0 of each CTA after each block-wide barrier, on the benchmark's shape
// ([8, 2048] ids over 16384 blocks, 2048 pages). Prints the mean phase durations and the
// event-timed duration of back-to-back launches of the real kernel (through its launcher).
// `sort_phases ncu` instead launches each variant 3 times for `ncu --metrics gpu__time_duration`:
// the real kernel with its 224 KiB dynamic-smem attribute, the same with the attribute lowered to
// what the launch uses, the stamped copy (static smem) and an empty kernel.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -Icuda scripts/probes/sort_phases.cu
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "smxx_sort_blocks.cu"

using namespace dsv41;

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

constexpr int kT = 512, kPhases = 6;

// Phase-stamped copy of the algorithm as of commit 6f4f940 (same loads and barriers; it emitted
// straight to global memory with three divisions per block, since replaced).
__global__ void __launch_bounds__(kT) Stamped(SortBlocksArgs a, unsigned long long* stamps) {
  __shared__ uint32_t bitmap[512];
  __shared__ int32_t staged[2048];
  __shared__ int32_t warp_sums[kT / 32];
  __shared__ int32_t total;
  unsigned long long* st = stamps + blockIdx.x * kPhases;
  if (threadIdx.x == 0) st[0] = Now();
  const int64_t row = blockIdx.x;
  const int32_t* sel = a.selected + row * a.c;
  const int32_t* row_pages = a.block_table + row * a.max_pages;
  const int32_t raw_len = a.lens[row];
  int32_t ids[4], pg[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    ids[j] = sel[j * kT + threadIdx.x];
    pg[j] = row_pages[j * kT + threadIdx.x];
  }
  const int64_t len = raw_len;
  const int64_t nblocks = (len + a.block_size - 1) / a.block_size;
  bitmap[threadIdx.x] = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) staged[j * kT + threadIdx.x] = pg[j];
  __syncthreads();
  if (threadIdx.x == 0) st[1] = Now();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int32_t b = ids[j];
    if (b >= 0 && b < nblocks) atomicOr(&bitmap[b >> 5], 1u << (b & 31));
  }
  __syncthreads();
  if (threadIdx.x == 0) st[2] = Now();
  int32_t out = BlockExclusiveScan<kT>(__popc(bitmap[threadIdx.x]), warp_sums, &total);
  if (threadIdx.x == 0) st[3] = Now();
  for (uint32_t bits = bitmap[threadIdx.x]; bits != 0; bits &= bits - 1) {
    const int32_t b = int32_t(threadIdx.x * 32 + __ffs(bits) - 1);
    const uint32_t pos = uint32_t(b) * uint32_t(a.block_size);
    const int32_t page = staged[pos / uint32_t(a.page_size)];
    a.blocks[row * a.c + out] = b;
    a.physical[row * a.c + out] = page * 8 + int32_t(pos % uint32_t(a.page_size)) / a.block_size;
    ++out;
  }
  __syncthreads();
  if (threadIdx.x == 0) st[4] = Now();
  __threadfence();
  if (threadIdx.x == 0) st[5] = Now();
}

__global__ void Empty() {}

int main(int argc, char** argv) {
  const int rows = 8, c = 2048, pages = 2048, sets = 4;
  std::vector<int32_t> h_sel(sets * rows * c), h_bt(sets * rows * pages), h_len(rows, 131072);
  srand(1);
  for (int s = 0; s < sets; ++s)
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> perm(16384);
      for (int i = 0; i < 16384; ++i) perm[i] = i;
      for (int i = 0; i < c; ++i) std::swap(perm[i], perm[i + rand() % (16384 - i)]);
      for (int i = 0; i < c; ++i) h_sel[(s * rows + r) * c + i] = perm[i];
      for (int i = 0; i < pages; ++i) h_bt[(s * rows + r) * pages + i] = rand() % (1 << 20);
    }
  int32_t *sel, *bt, *len, *blocks, *count, *valid, *phys;
  unsigned long long* stamps;
  cudaMalloc(&sel, h_sel.size() * 4), cudaMalloc(&bt, h_bt.size() * 4), cudaMalloc(&len, rows * 4);
  cudaMalloc(&blocks, sets * rows * c * 4), cudaMalloc(&phys, sets * rows * c * 4);
  cudaMalloc(&count, sets * rows * 4), cudaMalloc(&valid, sets * rows * 4);
  cudaMalloc(&stamps, rows * kPhases * 8);
  cudaMemcpy(sel, h_sel.data(), h_sel.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(bt, h_bt.data(), h_bt.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(len, h_len.data(), rows * 4, cudaMemcpyHostToDevice);
  auto args = [&](int s) {
    return SortBlocksArgs{sel + s * rows * c,
                          len,
                          bt + s * rows * pages,
                          blocks + s * rows * c,
                          count + s * rows,
                          valid + s * rows,
                          phys + s * rows * c,
                          rows,
                          c,
                          pages,
                          8,
                          64};
  };
  if (PrepareSortCandidateBlocks() != cudaSuccess) return 1;
  if (argc > 1) {  // ncu mode
    for (int i = 0; i < 3; ++i) LaunchSortCandidateBlocks(args(i), 0);
    cudaDeviceSynchronize();
    const size_t smem = (512 + 2048 + 2 * 2048) * 4;
    cudaFuncSetAttribute(SortCandidateBlocksKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(smem));
    for (int i = 0; i < 3; ++i) SortCandidateBlocksKernel<<<rows, 512, smem>>>(args(i), 512, 3);
    for (int i = 0; i < 3; ++i) Stamped<<<rows, kT>>>(args(i), stamps);
    for (int i = 0; i < 3; ++i) Empty<<<rows, kT>>>();
    cudaDeviceSynchronize();
    printf("OK %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  double phase[kPhases] = {};
  const int runs = 200;
  for (int it = 0; it < runs + 10; ++it) {
    Stamped<<<rows, kT>>>(args(it % sets), stamps);
    cudaDeviceSynchronize();
    unsigned long long h[rows * kPhases];
    cudaMemcpy(h, stamps, sizeof(h), cudaMemcpyDeviceToHost);
    if (it < 10) continue;
    unsigned long long t0 = ~0ull;
    for (int r = 0; r < rows; ++r) t0 = std::min(t0, h[r * kPhases]);
    for (int p = 0; p < kPhases; ++p) {
      unsigned long long m = 0;
      for (int r = 0; r < rows; ++r) m = std::max(m, h[r * kPhases + p] - t0);
      phase[p] += double(m) / runs;
    }
  }
  printf(
      "TIME stamped kernel, ns since first CTA start (max over CTAs): start %.0f loads %.0f "
      "atomics %.0f scan %.0f emit %.0f fence %.0f\n",
      phase[0], phase[1], phase[2], phase[3], phase[4], phase[5]);
  // Back-to-back launches, events around a batch: per-launch time of the real kernel / empty.
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int variant = 0; variant < 2; ++variant) {
    for (int rep = 0; rep < 3; ++rep) {
      cudaEventRecord(e0);
      for (int it = 0; it < 1000; ++it) {
        if (variant == 0)
          LaunchSortCandidateBlocks(args(it % sets), 0);
        else
          Empty<<<rows, kT>>>();
      }
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      printf("TIME %s back-to-back: %.2f us per launch\n", variant ? "empty kernel" : "sort kernel",
             ms);
    }
  }
  printf("OK %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
