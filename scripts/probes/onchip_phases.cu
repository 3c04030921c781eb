// Where does the one-kernel sparse select's time go? ffi/sm90_sparse_select.cu compiled with its
// phase stamps (DSV41_PHASE_STAMPS: thread 0 of each CTA records %globaltimer at the phase ends)
// at V4.1's defaults (32 heads, C = 2048 blocks of 8: 16K columns a row, k = 512) over random fp8
// values, every row's 128K-token context on pages of its own. Prints per batch the event-timed
// time of 20 back-to-back launches, the cluster size, and the phase ends in us since each CTA's
// start, median over CTAs (max in brackets): 1 = cluster started, 2 = thread 0's first tile
// scored, 3 = thread 0's tiles scored; rank 0 only: 4 = the row's keys gathered, 5 / 6 / 7 =
// digit pass 1 / 2 / 3 decided, 8 = output counts scanned, 9 = output written, 10 = thread 0's
// keys loaded, 11 / 12 = pass 2 / 3 counted, 13 = thread 0's output counts made, 14 = thread
// 0's candidates kept.
// Build and run: scripts/device_check.sh ffiprobe:scripts/probes/onchip_phases.cu (nvcc for
// sm_90a with -Icuda -Iffi and the jaxlib and DeepGEMM include folders).
#define DSV41_PHASE_STAMPS
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "sm90_sparse_select.cu"

using namespace dsv41;

int main() {
  if (PrepareSparseSelectSm90() != cudaSuccess) return 1;
  constexpr int64_t kHeads = 32, kC = 2048, kPagesPerRow = 2048, kK = 512;
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> unit(0.01f, 1.0f);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  // Random fp8 e4m3fn bytes without NaN (0x7f / 0xff): exponents kept small, any sign; 8 a call.
  auto fp8x8 = [&state] {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) & 0xb7b7b7b7b7b7b7b7ull;
  };
  auto fill = [&](uint8_t* p, int64_t bytes) {  // bytes: a multiple of 8
    for (int64_t i = 0; i < bytes; i += 8) {
      const uint64_t v = fp8x8();
      std::memcpy(p + i, &v, 8);
    }
  };
  for (int64_t rows : {1, 8, 16, 32, 64, 128}) {
    const int64_t pages = rows * kPagesPerRow, page_bytes = 64 * 132;
    std::vector<uint8_t> q(rows * kHeads * 128), kv(pages * page_bytes);
    fill(q.data(), int64_t(q.size()));
    for (int64_t p = 0; p < pages; ++p) {
      uint8_t* page = kv.data() + p * page_bytes;
      fill(page, 64 * 128);
      float* scales = reinterpret_cast<float*>(page + 64 * 128);
      for (int i = 0; i < 64; ++i) scales[i] = 0.01f + float(i % 17) / 16;
    }
    std::vector<float> w(rows * kHeads);
    for (auto& v : w) v = unit(gen) - 0.5f;
    std::vector<int32_t> physical(rows * kC), blocks(rows * kC), lens(rows, int32_t(kC * 8));
    std::uniform_int_distribution<int32_t> slot(0, int32_t(kPagesPerRow * 8 - 1));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kC; ++j) {
        const int32_t s = slot(gen);
        physical[r * kC + j] = int32_t(r * kPagesPerRow * 8) + s;
        blocks[r * kC + j] = s;
      }
    }
    uint8_t *d_q, *d_kv;
    float* d_w;
    int32_t *d_phys, *d_blocks, *d_lens, *d_out;
    cudaMalloc(&d_q, q.size()), cudaMalloc(&d_kv, kv.size()), cudaMalloc(&d_w, w.size() * 4);
    cudaMalloc(&d_phys, physical.size() * 4), cudaMalloc(&d_blocks, blocks.size() * 4);
    cudaMalloc(&d_lens, rows * 4), cudaMalloc(&d_out, rows * kK * 4);
    cudaMemcpy(d_q, q.data(), q.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(d_kv, kv.data(), kv.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(d_w, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_phys, physical.data(), physical.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_blocks, blocks.data(), blocks.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_lens, lens.data(), rows * 4, cudaMemcpyHostToDevice);
    const Sm90SparseLogits call{d_q, d_w, d_kv, d_phys, d_lens, nullptr, rows, kHeads, pages, kC};
    auto launch = [&] {
      const ffi::Error e = LaunchSm90SparseSelect("probe", 0, call, d_blocks, int32_t(kK), d_out);
      if (!e.success()) std::printf("FAIL %s\n", e.message().c_str());
    };
    for (int i = 0; i < 3; ++i) launch();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < 20; ++i) launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    static unsigned long long st[4096][16];
    std::memset(st, 0, sizeof(st));
    cudaMemcpyToSymbol(g_phase_stamps, st, sizeof(st));  // one more launch, stamps from zero
    launch();
    cudaDeviceSynchronize();
    cudaMemcpyFromSymbol(st, g_phase_stamps, sizeof(st));
    const int cl = SparseSelectClusterSize(rows, kC);
    std::printf("TIME rows %ld (clusters of %d): %.1f us per launch (events, 20 launches):", rows,
                cl, ms * 1000 / 20);
    for (int phase = 1; phase < 16; ++phase) {
      std::vector<double> d;
      for (int64_t b = 0; b < rows * cl; ++b) {
        if (st[b][phase] != 0) d.push_back(double(st[b][phase] - st[b][0]) / 1000);
      }
      if (d.empty()) continue;
      std::sort(d.begin(), d.end());
      std::printf(" %d: %.1f [%.1f]", phase, d[d.size() / 2], d.back());
    }
    std::printf("\n");
    cudaFree(d_q), cudaFree(d_kv), cudaFree(d_w), cudaFree(d_phys), cudaFree(d_blocks);
    cudaFree(d_lens), cudaFree(d_out);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
