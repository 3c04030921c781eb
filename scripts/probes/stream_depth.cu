// How fast the filter-first select's stream can read, by how many bytes each CTA keeps in
// flight: the select streams a row chunk a CTA (1024 threads, 8 floats a thread a round of 32
// KiB) with one round prefetched in registers, and few CTAs run at [8, 1M] (64) or [8, 128K].
// Variants, each over the same chunks:
//   regs1   one round ahead in registers (the select's pattern today)
//   regs2   two rounds ahead in registers
//   bulk2, bulk4   2 or 4 rounds staged in shared memory by cp.async.bulk (one bulk copy of 32
//                  KiB a round, issued by one thread, completion on an mbarrier)
// each alone ("load") and with the select's per-round work ("scan": count the keys at or above
// a bar, then one block scan, as the select does to place them in its buffer); and one round
// ahead with the select's own steps: "keys" (each score's key by topk::ScoresToKeys, a 64-bit
// bar, the scan) and "append" (and the passing pairs written to a shared buffer). Prints
// `TIME variant work shape us GB/s` (median of 21, CUDA events) and `OK` / `BAD` (every variant
// must count the same keys).
//   nvcc -O3 -std=c++20 -arch=sm_90a -Icuda stream_depth.cu && ./a.out
//   (scripts/device_check.sh cuprobe:scripts/probes/stream_depth.cu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "smxx_block_scan.cuh"
#include "smxx_topk_keys.cuh"

constexpr int kThreads = 1024, kPer = 8, kRound = kThreads * kPer;  // 8192 floats, 32 KiB
constexpr uint32_t kRoundBytes = kRound * sizeof(float);

struct Shared {
  int32_t warp_sums[kThreads / 32];
  int32_t scan_total;
};

// The keys at or above `bar` among a thread's 8 values; with kScan, one block scan a round
// (its three barriers), as the select places them in its buffer.
template <bool kScan>
__device__ __forceinline__ int32_t Work(Shared& sh, const float (&v)[kPer], float bar) {
  int32_t n = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) n += v[j] >= bar;
  if constexpr (kScan) {
    const int32_t slot = dsv41::BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
    if (slot < 0) n = 0;  // never: keeps the scan
  }
  return n;
}

// The CTA's count added to `count` by one atomic (the block scan's total): 1024 atomics a CTA
// on one word serialize in L2 (about 0.8 us a CTA), which would swamp the stream being timed.
__device__ __forceinline__ void AddCount(Shared& sh, int32_t n, unsigned long long* count) {
  dsv41::BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
  if (threadIdx.x == 0) atomicAdd(count, (unsigned long long)sh.scan_total);
}

__device__ __forceinline__ void Load8(const float* p, float (&v)[kPer]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// kDepth rounds ahead in registers; a chunk is whole rounds.
template <int kDepth, bool kScan>
__global__ void __launch_bounds__(kThreads, 1)
    Regs(const float* data, int64_t chunk, float bar, unsigned long long* count) {
  __shared__ Shared sh;
  const float* base = data + int64_t(blockIdx.x) * chunk + threadIdx.x * kPer;
  const int64_t rounds = chunk / kRound;
  float v[kDepth][kPer];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (d < rounds) Load8(base + d * kRound, v[d]);
  }
  int32_t n = 0;
  for (int64_t r = 0; r < rounds; r += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (r + d < rounds) {
        float cur[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j) cur[j] = v[d][j];
        if (r + d + kDepth < rounds) Load8(base + (r + d + kDepth) * kRound, v[d]);
        n += Work<kScan>(sh, cur, bar);
      }
    }
  }
  AddCount(sh, n, count);
}

enum class Step { kKeys, kAppend };
constexpr int kCap = 12288;  // the select's buffer of (key, position) pairs

// The filter select's per-round work on the same stream, one round ahead in registers: each
// score's key (topk::ScoresToKeys, with its bounds and NaN checks), the count at or above a
// 64-bit bar, one block scan, and (kAppend) each passing pair written to a shared buffer at its
// scanned slot, the buffer's overflow checked a round (here it restarts instead of being cut).
template <Step kStep>
__global__ void __launch_bounds__(kThreads, 1)
    SelectStream(const float* data, int64_t chunk, float bar_score, unsigned long long* count) {
  extern __shared__ __align__(16) uint32_t buffer[];  // kCap keys, then kCap positions
  __shared__ Shared sh;
  uint32_t* keys = buffer;
  int32_t* pos = reinterpret_cast<int32_t*>(buffer + kCap);
  dsv41::TopkArgs a{};
  a.mode = dsv41::TopkMode::kPositions;
  const dsv41::topk::Row<float> r{
      data + int64_t(blockIdx.x) * chunk, chunk, 0, chunk, chunk - 1, nullptr, 0};
  const uint64_t bar = dsv41::topk::OrderedKey(bar_score);
  float v[kPer];
  dsv41::topk::LoadScores<kPer>(r, chunk, int64_t(threadIdx.x) * kPer, true, v);
  int32_t mine = 0, held = 0;  // held: the pairs in the buffer (kAppend)
  for (int64_t base = 0; base < chunk; base += kRound) {
    const int64_t i0 = base + int64_t(threadIdx.x) * kPer;
    uint32_t kk[kPer];
    dsv41::topk::ScoresToKeys<kPer>(a, r, chunk, i0, v, kk);
    if (base + kRound < chunk) dsv41::topk::LoadScores<kPer>(r, chunk, i0 + kRound, true, v);
    int32_t n = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) n += kk[j] >= bar;
    int32_t slot = dsv41::BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
    if constexpr (kStep == Step::kKeys) {
      if (slot < 0) n = 0;  // never: keeps the scan
    } else {
      const int32_t round = sh.scan_total;
      if (held + round > kCap) held = 0;  // uniform
      slot += held;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (kk[j] >= bar) keys[slot] = kk[j], pos[slot] = int32_t(r.lo + i0 + j), ++slot;
      }
      held += round;
    }
    mine += n;
  }
  AddCount(sh, mine, count);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// kStages rounds staged in shared memory by one bulk copy each (thread 0 issues, an mbarrier a
// stage counts the bytes); a stage is refilled after the CTA's barrier past its reads.
template <int kStages, bool kScan>
__global__ void __launch_bounds__(kThreads, 1)
    Bulk(const float* data, int64_t chunk, float bar, unsigned long long* count) {
  extern __shared__ __align__(128) float stage[];  // kStages x kRound floats
  __shared__ Shared sh;
  __shared__ __align__(8) uint64_t full[kStages];
  const float* src = data + int64_t(blockIdx.x) * chunk;
  const int64_t rounds = chunk / kRound;
  auto issue = [&](int64_t r) {  // thread 0: round r into its stage
    const int s = int(r % kStages);
    const uint32_t bar_addr = SmemAddr(&full[s]);
    // The CTA's reads of the stage (generic proxy, ordered by the barrier before) before the
    // bulk copy's writes (async proxy).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr),
                 "r"(kRoundBytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];" ::"r"(SmemAddr(stage + s * kRound)),
        "l"(src + r * kRound), "r"(kRoundBytes), "r"(bar_addr)
        : "memory");
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(&full[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t r = 0; r < kStages && r < rounds; ++r) issue(r);
  }
  int32_t n = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    const int s = int(r % kStages);
    const uint32_t parity = uint32_t((r / kStages) & 1);
    const uint32_t bar_addr = SmemAddr(&full[s]);
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
          "selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(bar_addr), "r"(parity)
          : "memory");
    }
    float v[kPer];
    const float4* p = reinterpret_cast<const float4*>(stage + s * kRound + threadIdx.x * kPer);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    n += Work<kScan>(sh, v, bar);
    __syncthreads();  // every thread has read stage s: refill it
    if (threadIdx.x == 0 && r + kStages < rounds) issue(r + kStages);
  }
  AddCount(sh, n, count);
}

template <class Kernel>
float TimeUs(Kernel launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 23; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 2) t.push_back(ms * 1000.0f);  // two warm-ups
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a), cudaEventDestroy(b);
  return t[t.size() / 2];
}

int main() {
  struct Shape {
    int rows;
    int64_t n;
    int cl;
  };
  // The filter select's clusters at these shapes (one wave): CTAs = rows x cl; [8, 1M] also
  // over 16 CTAs a row (128 CTAs: what a row split past one cluster would stream).
  const Shape shapes[] = {
      {8, 1 << 20, 8}, {8, 1 << 20, 16}, {64, 1 << 20, 2}, {8, 1 << 17, 8}, {64, 1 << 17, 2}};
  int64_t most = 0;
  for (const Shape& s : shapes) most = std::max(most, int64_t(s.rows) * s.n);
  std::vector<float> host(most);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (float& x : host) x = normal(gen);
  float* data;
  unsigned long long* count;
  cudaMalloc(&data, most * sizeof(float));
  cudaMalloc(&count, sizeof(unsigned long long));
  cudaMemcpy(data, host.data(), most * sizeof(float), cudaMemcpyHostToDevice);
  const float bar = 2.9f;  // about 0.2% of normal keys: ~2k of a 1M row, as the select's bar
  const size_t smem_pairs = 2 * kCap * sizeof(uint32_t);
  for (auto kernel : {SelectStream<Step::kKeys>, SelectStream<Step::kAppend>}) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_pairs));
  }
  for (auto kernel : {Bulk<2, false>, Bulk<2, true>, Bulk<4, false>, Bulk<4, true>}) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         4 * kRound * int(sizeof(float)));
  }
  bool ok = true;
  for (const Shape& s : shapes) {
    const int ctas = s.rows * s.cl;
    const int64_t chunk = s.n / s.cl;
    const double bytes = double(s.rows) * double(s.n) * sizeof(float);
    char shape[32];
    snprintf(shape, sizeof shape, "[%d,%lldK]x%d", s.rows, (long long)(s.n / 1024), s.cl);
    unsigned long long want = ~0ull;
    auto run = [&](const char* name, const char* work, auto launch) {
      cudaMemset(count, 0, sizeof *count);
      launch();
      unsigned long long got = 0;
      cudaMemcpy(&got, count, sizeof got, cudaMemcpyDeviceToHost);
      const cudaError_t err = cudaGetLastError();
      if (want == ~0ull) want = got;
      const bool same = err == cudaSuccess && got == want;
      ok = ok && same;
      const float us = TimeUs(launch);
      printf("TIME %s %s %s %.2f us %.0f GB/s\n", name, work, shape, us, bytes / us * 1e-3);
      if (!same)
        printf("BAD %s %s %s count %llu want %llu (%s)\n", name, work, shape, got, want,
               cudaGetErrorString(err));
    };
    const size_t smem2 = 2 * kRoundBytes, smem4 = 4 * kRoundBytes;
    for (int scan = 0; scan < 2; ++scan) {
      const char* work = scan ? "scan" : "load";
      run("regs1", work, [&] {
        if (scan)
          Regs<1, true><<<ctas, kThreads>>>(data, chunk, bar, count);
        else
          Regs<1, false><<<ctas, kThreads>>>(data, chunk, bar, count);
      });
      run("regs2", work, [&] {
        if (scan)
          Regs<2, true><<<ctas, kThreads>>>(data, chunk, bar, count);
        else
          Regs<2, false><<<ctas, kThreads>>>(data, chunk, bar, count);
      });
      run("bulk2", work, [&] {
        if (scan)
          Bulk<2, true><<<ctas, kThreads, smem2>>>(data, chunk, bar, count);
        else
          Bulk<2, false><<<ctas, kThreads, smem2>>>(data, chunk, bar, count);
      });
      run("bulk4", work, [&] {
        if (scan)
          Bulk<4, true><<<ctas, kThreads, smem4>>>(data, chunk, bar, count);
        else
          Bulk<4, false><<<ctas, kThreads, smem4>>>(data, chunk, bar, count);
      });
    }
    run("regs1", "keys", [&] {
      SelectStream<Step::kKeys><<<ctas, kThreads, smem_pairs>>>(data, chunk, bar, count);
    });
    run("regs1", "append", [&] {
      SelectStream<Step::kAppend><<<ctas, kThreads, smem_pairs>>>(data, chunk, bar, count);
    });
  }
  printf("%s every variant counted the same keys\n", ok ? "OK" : "BAD");
  return ok ? 0 : 1;
}
