// Where does a top-k kernel's time go? The production kernel compiled with its phase stamps
// (DSV41_PHASE_STAMPS: thread 0 of each CTA records %globaltimer at the phase ends), on the
// benchmark's shapes with standard-normal scores. Prints, per shape, the event-timed duration
// of 20 back-to-back launches and the phase ends in us since the first CTA started (max over
// CTAs). Cluster radix select: 1 = keys cached, 2/3 + 2p = pass p counted / merged, 10 =
// offsets known, 11 = emitted. Filter select (-DPROBE_FILTER): 1 = bar sampled, 2 = chunk
// streamed, 3 = chunk cut to k, 4 = chunks gathered, 5 = row cut to k, 6 = emitted. Short-row
// select (-DPROBE_SHORT): 1 = keys loaded, 10 / 15 = pass 1 counted / its counts exchanged,
// 2/3/4 = digit pass 1/2/3 decided, 5 = emitted;
// where a cluster gathers its candidates into rank 0, 3 = offsets known, 4 = gathered, then
// the on-chip select's (from 14, below); its rows of one CTA: 2 = keys made (loosely: thread 0's
// stamp may issue before its loads land), 4 = keys stored and counted, 1 = pass 1's groups
// summed, then the on-chip select's (10 = pass 1's digit found, 14 = candidates kept, 6/7 =
// pass 2/3 decided, 8 = slots known, 9 = emitted), 15 = done.
// The filter select's split rows (-DPROBE_SPLIT, given a workspace; both kernels stamp the same
// CTA's row): 1 = row bar sampled, 2 = chunk streamed, 3 = slot stored; 7 = merge started,
// 8 = slot offsets read, 9 = slots gathered, 10 = cut and emitted.
// Each shape's line is followed by a digest of the positions selected (DIGEST): one exact
// answer a shape, so every variant of an A/B prints the same (ab_summary.py compares them).
// Build: nvcc -O3 -std=c++20 -arch=sm_90a -Icuda [-DPROBE_FILTER|-DPROBE_SPLIT|-DPROBE_SHORT]
//        scripts/probes/topk_phases.cu
#define DSV41_PHASE_STAMPS
#if defined(PROBE_SPLIT) && !defined(PROBE_FILTER)
#define PROBE_FILTER
#endif
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if defined(PROBE_SHORT)
#include "smxx_short_topk.cu"
#define PREPARE PrepareShortTopk
#define LAUNCH LaunchShortTopk
#elif defined(PROBE_FILTER)
#include "smxx_filter_topk.cu"
#define PREPARE PrepareFilterTopk
#define LAUNCH LaunchFilterTopk
#else
#include "smxx_cluster_topk.cu"
#define PREPARE PrepareClusterTopk
#define LAUNCH LaunchClusterTopk
#endif

using namespace dsv41;

int main() {
  if (PREPARE() != cudaSuccess) return 1;
#if defined(PROBE_SPLIT)
  const int64_t shapes[][3] = {
      {1, 131072, 512}, {8, 131072, 512}, {1, 1 << 20, 512}, {8, 1 << 20, 512}, {4, 1 << 20, 2048}};
#elif defined(PROBE_SHORT)
  const int64_t shapes[][3] = {{1, 16384, 512},   {8, 16384, 512},   {64, 16384, 512},
                               {8, 16384, 2048},  {8, 65536, 512},   {8, 131072, 512},
                               {16, 131072, 512}, {8, 131072, 2048}, {8, 2048, 512},
                               {8, 4096, 512},    {8, 8192, 512}};
#else
  const int64_t shapes[][3] = {{8, 131072, 512},   {64, 131072, 512}, {8, 1 << 20, 512},
                               {64, 1 << 20, 512}, {8, 131072, 2048}, {8, 16384, 2048}};
#endif
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], n = sh[1], k = sh[2];
    std::vector<float> h(rows * n);
    for (float& v : h) v = normal(gen);
    std::vector<int32_t> lens(rows, int32_t(n));
    float* scores;
    int32_t *d_lens, *out;
    cudaMalloc(&scores, h.size() * 4), cudaMalloc(&d_lens, rows * 4);
    cudaMalloc(&out, rows * k * 4);
    cudaMemcpy(scores, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_lens, lens.data(), rows * 4, cudaMemcpyHostToDevice);
    TopkArgs a{
        scores, d_lens, nullptr, nullptr, out, rows, n, 0, int32_t(k), 8, TopkMode::kPositions,
        false};
#ifdef PROBE_SPLIT
    a.workspace_words = rows * kFilterSplitRowWords;
    cudaMalloc(&a.workspace, a.workspace_words * 4);
#endif
    for (int i = 0; i < 3; ++i) LAUNCH(a, 0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < 20; ++i) LAUNCH(a, 0);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    static unsigned long long st[4096][16];
    memset(st, 0, sizeof(st));
    cudaMemcpyToSymbol(g_phase_stamps, st, sizeof(st));  // one more launch, stamps from zero
    LAUNCH(a, 0);
    cudaDeviceSynchronize();
    cudaMemcpyFromSymbol(st, g_phase_stamps, sizeof(st));
    int grid = 0;
    while (grid < 4096 && st[grid][0] != 0) ++grid;
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < grid; ++b) t0 = std::min(t0, st[b][0]);
    printf(
        "TIME k=%ld [%ld, %ld]: %.1f us per launch (events, 20 launches), %d CTAs; phase ends "
        "(us):",
        long(k), long(rows), long(n), ms * 1000 / 20, grid);
    for (int p = 0; p < 16; ++p) {
      unsigned long long m = 0;
      bool any = false;
      for (int b = 0; b < grid; ++b) {
        if (st[b][p] >= t0 && st[b][p] != 0) m = std::max(m, st[b][p] - t0), any = true;
      }
      if (any) printf(" %d:%.2f", p, m / 1000.0);
    }
    printf("\n");
    // DIGEST: the stamped launch's positions, hashed (FNV-1a).
    std::vector<int32_t> got(rows * k);
    cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost);
    unsigned long long digest = 1469598103934665603ull;
    for (int32_t x : got) digest = (digest ^ uint32_t(x)) * 1099511628211ull;
    printf("DIGEST k=%ld [%ld, %ld]: %016llx\n", long(k), long(rows), long(n), digest);
    cudaFree(scores), cudaFree(d_lens), cudaFree(out), cudaFree(a.workspace);
  }
  printf("OK %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
