// What a CUDA graph launch costs the host, by node count and parameter size, beside launching
// the same kernels one by one (XLA's command buffers launch a jitted step's kernels as graphs).
// Host µs per enqueue (no sync inside the timed loop; the queue never fills), medians of 9
// repeats; kernels of 16-byte and of 528-byte parameters (DeepGEMM's logits kernel passes
// four 128-byte TMA maps by value). Also cudaGraphExecUpdate (a recorded graph given new
// parameters).
//   nvcc -O3 -std=c++20 -arch=sm_90a graph_launch.cu && ./a.out
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

struct Big {
  char bytes[512];
};

__global__ void Small(int* p, int i) {
  if (threadIdx.x == 0 && p) p[i] += 1;
}
__global__ void Large(Big b, int* p, int i) {
  if (threadIdx.x == 0 && p) p[i] += b.bytes[i % 512];
}

static double Now() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static void Launch(cudaStream_t s, int n, bool large, int* p) {
  Big b{};
  for (int i = 0; i < n; ++i) {
    if (large && i % 2 == 0) {
      Large<<<1, 32, 0, s>>>(b, p, i);
    } else {
      Small<<<1, 32, 0, s>>>(p, i);
    }
  }
}

static double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  cudaStream_t s, rec;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&rec, cudaStreamNonBlocking);
  int* p = nullptr;
  cudaMalloc(&p, 4096 * sizeof(int));
  const int calls = 30;
  for (bool large : {false, true}) {
    for (int n : {1, 4, 13, 25, 50}) {
      cudaGraph_t g;
      cudaStreamBeginCapture(rec, cudaStreamCaptureModeThreadLocal);
      Launch(rec, n, large, p);
      cudaStreamEndCapture(rec, &g);
      cudaGraphExec_t exec;
      cudaGraphInstantiate(&exec, g, 0);
      cudaGraphUpload(exec, s);
      std::vector<double> graph, direct, update;
      for (int rep = 0; rep < 9; ++rep) {
        double t = Now();
        for (int c = 0; c < calls; ++c) cudaGraphLaunch(exec, s);
        graph.push_back((Now() - t) / calls);
        cudaStreamSynchronize(s);
        t = Now();
        for (int c = 0; c < calls; ++c) Launch(s, n, large, p);
        direct.push_back((Now() - t) / calls);
        cudaStreamSynchronize(s);
        // A miss: record the launches again (new parameters), update the exec in place.
        t = Now();
        cudaGraph_t g2;
        cudaStreamBeginCapture(rec, cudaStreamCaptureModeThreadLocal);
        Launch(rec, n, large, p + 1 + rep);
        cudaStreamEndCapture(rec, &g2);
        cudaGraphExecUpdateResultInfo info;
        cudaGraphExecUpdate(exec, g2, &info);
        cudaGraphDestroy(g2);
        cudaGraphLaunch(exec, s);
        update.push_back(Now() - t);
        cudaStreamSynchronize(s);
      }
      std::printf(
          "TIME nodes=%2d params=%s graph launch %.2f us, direct %.2f us (%.2f a kernel), "
          "record+update+launch %.2f us\n",
          n, large ? "528B/16B" : "16B", Median(graph), Median(direct), Median(direct) / n,
          Median(update));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("%s %s\n", err == cudaSuccess ? "OK" : "FAIL", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
