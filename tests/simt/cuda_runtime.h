// A CPU stand-in for the parts of the CUDA runtime the project's own kernels use, so their
// source compiles with g++ and runs on a machine without a GPU (tests/selection.py).
//
// Every CUDA thread is a fiber (ucontext); one OS thread runs one CTA's fibers, each until it
// waits at a barrier, in a pseudo-random order that changes every pass. Barriers
// (__syncthreads, the warp exchange inside __shfl_up_sync / __shfl_sync / __ballot_sync,
// cluster.sync) are generation counters, so a fiber resumes only once its whole group arrived.
// The CTAs of a cluster run on concurrent OS threads; `__shared__` variables are thread_local,
// so each CTA has its own, and map_shared_rank moves an address between the CTAs' thread-local
// blocks (same layout in every thread); a CTA that exits while a peer may still read its shared
// memory (no cluster.sync of its own after the read) fails the launch. Atomics are plain
// operations: a CTA's fibers share one OS thread and never interleave inside an expression.
// With EMU_CLUSTER_SYNCS set to a file, each cluster appends a line: the most cluster.syncs one
// of its CTAs passed (which way a kernel took, for the tests).
//
// It checks the kernels' logic (indexing, barriers, the cluster protocol) against the reference.
// It is not the GPU: no memory model, no timing, no out-of-bounds traps beyond what the host
// allocator catches; a kernel still has to run on the device before it is called done.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __popc(uint32_t x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return T(a) < T(b) ? T(a) : T(b);
}
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return T(a) < T(b) ? T(b) : T(a);
}

using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorLaunchFailure = 4;
inline const char* cudaGetErrorString(cudaError_t e) { return e == 0 ? "success" : "error"; }
using cudaStream_t = void*;
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize,
  cudaFuncAttributeNonPortableClusterSizeAllowed
};
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}
// One device 0 whose SM count is unknown (a launcher that reads it takes its fallback here)
// unless a run sets emu_sm_count.
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline int emu_sm_count = 0;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = emu_sm_count;
  return emu_sm_count > 0 ? cudaSuccess : cudaErrorInvalidValue;
}
// Programmatic serialization (PDL) changes nothing here: a launch's grids run one after another.
enum cudaLaunchAttributeID {
  cudaLaunchAttributeClusterDimension = 4,
  cudaLaunchAttributeProgrammaticStreamSerialization = 6
};
struct cudaLaunchAttributeValue {
  struct {
    unsigned x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

// Per fiber, reserved lazily (MAP_NORESERVE). Under AddressSanitizer every swapcontext clears
// the shadow of the whole target stack (kStack / 8 bytes a switch: half the stand-in's time at
// 128 KiB), so it is no larger than it needs: the deepest fiber of the emulated tests (tests/
// test_topk, _blocks, _candidate_blocks, _filter_select, _onchip_select, _short_select_cluster,
// _logits, _fused) used 4.9 KiB, under AddressSanitizer.
constexpr size_t kStack = 32 * 1024;

// The CTAs' OS threads meet here at each cluster.sync. A CTA that exits while a peer waits, or
// that a peer waits for after it exited, would hang the launch (the CTAs passed different numbers
// of cluster.syncs): the stand-in aborts instead.
class ClusterBarrier {
 public:
  explicit ClusterBarrier(int n) : size_(n) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(m_);
    const long g = gen_;
    if (++arrived_ == size_) {
      arrived_ = 0, ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != g || exited_ > 0; });
    if (gen_ == g) Mismatch();
  }
  void Exit() {
    std::lock_guard<std::mutex> lock(m_);
    ++exited_;
    if (arrived_ > 0) Mismatch();
    cv_.notify_all();
  }

 private:
  [[noreturn]] static void Mismatch() {
    std::fprintf(stderr,
                 "emu: deadlock in a cluster (a CTA exited while its peers wait at a "
                 "cluster.sync: the CTAs pass different numbers of them)\n");
    std::abort();
  }
  std::mutex m_;
  std::condition_variable cv_;
  int size_, arrived_ = 0, exited_ = 0;
  long gen_ = 0;
};

struct Cluster {
  int size;
  std::vector<char*> anchors;  // each CTA's thread-local anchor
  ClusterBarrier os_barrier;
  // Distributed shared memory lifetime: read_at[r][q] is the last cluster.sync count at which CTA
  // r mapped CTA q's shared memory (-1: never), exit_at[q] the count CTA q exited at. A read is
  // only safe if its target passes one more cluster.sync after it (each CTA writes its own row).
  std::vector<std::vector<long>> read_at;
  std::vector<long> exit_at;
  explicit Cluster(int n)
      : size(n), anchors(n), os_barrier(n), read_at(n, std::vector<long>(n, -1)), exit_at(n, 0) {}
};

struct Cta {
  int n = 0, cur = 0, live = 0;
  std::vector<ucontext_t> ctx;
  char* stacks = nullptr;
  std::vector<bool> done;
  ucontext_t sched;
  long progress = 0;
  long block_gen = 0;
  int block_count = 0;
  std::vector<long> warp_gen;
  std::vector<int> warp_count;
  std::vector<int64_t> lanes;  // __shfl_up_sync exchange, one slot per thread
  std::function<void()> body;
  Cluster* cluster = nullptr;
  int rank = 0;
  long cluster_syncs = 0;  // cluster.sync calls this CTA passed
};

inline thread_local Cta* tl_cta = nullptr;
inline thread_local char tl_anchor = 0;
// Called on each CTA's OS thread before its first thread runs and after its last one ends,
// with the launch's dynamic shared memory size: the harness poisons the CTA's shared memory,
// and puts a canary past the requested size that must survive the CTA.
inline std::function<void(size_t)> on_cta_start, on_cta_end;

inline void Yield() {
  Cta* c = tl_cta;
  swapcontext(&c->ctx[c->cur], &c->sched);
}

// Wait until `count` members of a group arrived; `last` runs once, in the last arriver, first.
inline void Arrive(long& gen, int& count, int size, const std::function<void()>& last = {}) {
  Cta* c = tl_cta;
  const long g = gen;
  ++c->progress;
  if (++count == size) {
    if (last) last();
    count = 0;
    ++gen;
    return;
  }
  while (gen == g) Yield();
}

inline void FiberEntry() {
  Cta* c = tl_cta;
  c->body();
  c->done[c->cur] = true;
  --c->live;
  ++c->progress;
}

inline void RunCta(Cta& c, size_t dynamic_smem) {
  tl_cta = &c;
  c.ctx.resize(c.n);
  const size_t bytes = size_t(c.n) * kStack;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) std::abort();
  c.stacks = static_cast<char*>(mem);
  c.done.assign(c.n, false);
  c.live = c.n;
  c.warp_gen.assign((c.n + 31) / 32, 0);
  c.warp_count.assign((c.n + 31) / 32, 0);
  c.lanes.assign(c.n, 0);
  if (on_cta_start) on_cta_start(dynamic_smem);
  for (int i = 0; i < c.n; ++i) {
    getcontext(&c.ctx[i]);
    c.ctx[i].uc_stack.ss_sp = c.stacks + size_t(i) * kStack;
    c.ctx[i].uc_stack.ss_size = kStack;
    c.ctx[i].uc_link = &c.sched;
    makecontext(&c.ctx[i], FiberEntry, 0);
  }
  // Threads run in a fresh pseudo-random order on every pass (SIMT_ORDER=forward: in index
  // order), so a read that only works when its writer happened to run first shows up.
  std::vector<int> order(c.n);
  for (int i = 0; i < c.n; ++i) order[i] = i;
  const char* mode = std::getenv("SIMT_ORDER");
  const bool shuffle = mode == nullptr || std::strcmp(mode, "forward") != 0;
  uint64_t state = 0x9E3779B97F4A7C15ull ^ blockIdx.x;
  while (c.live > 0) {
    const long before = c.progress;
    for (int i = c.n - 1; shuffle && i > 0; --i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(order[i], order[(state >> 33) % uint64_t(i + 1)]);
    }
    for (int i : order) {
      if (c.done[i]) continue;
      c.cur = i;
      threadIdx = dim3(unsigned(i));
      swapcontext(&c.sched, &c.ctx[i]);
    }
    if (c.progress == before && c.live > 0) {
      std::fprintf(stderr, "emu: deadlock in CTA %u (threads wait at different barriers)\n",
                   blockIdx.x);
      std::abort();
    }
  }
  munmap(c.stacks, bytes);
  if (c.cluster != nullptr) {
    c.cluster->exit_at[c.rank] = c.cluster_syncs;
    c.cluster->os_barrier.Exit();
  }
  if (on_cta_end) on_cta_end(dynamic_smem);
}

}  // namespace emu

inline void __syncthreads() {
  emu::Cta* c = emu::tl_cta;
  emu::Arrive(c->block_gen, c->block_count, c->n);
}

template <class T>
T __shfl_up_sync(unsigned, T v, int d) {
  emu::Cta* c = emu::tl_cta;
  const int t = c->cur, w = t / 32, lane = t % 32;
  int64_t slot;
  std::memcpy(&slot, &v, sizeof(T));
  c->lanes[t] = slot;
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  T out = v;
  if (lane >= d) std::memcpy(&out, &c->lanes[t - d], sizeof(T));
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  return out;
}

template <class T>
T __shfl_sync(unsigned, T v, int src) {
  emu::Cta* c = emu::tl_cta;
  const int t = c->cur, w = t / 32;
  int64_t slot = 0;
  std::memcpy(&slot, &v, sizeof(T));
  c->lanes[t] = slot;
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  T out;
  std::memcpy(&out, &c->lanes[w * 32 + (src & 31)], sizeof(T));
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  return out;
}

// Every lane of the warp calls it (the mask is not modelled): bit l of the result is lane l's
// `pred`.
inline unsigned __ballot_sync(unsigned, int pred) {
  emu::Cta* c = emu::tl_cta;
  const int t = c->cur, w = t / 32;
  c->lanes[t] = pred != 0;
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  unsigned out = 0;
  for (int l = 0; l < 32; ++l) out |= unsigned(c->lanes[w * 32 + l] != 0) << l;
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
  return out;
}

// Every lane of the warp calls it (the mask is not modelled).
inline void __syncwarp(unsigned = 0xffffffffu) {
  emu::Cta* c = emu::tl_cta;
  const int w = c->cur / 32;
  emu::Arrive(c->warp_gen[w], c->warp_count[w], 32);
}

namespace emu {
// Every lane of the warp calls it: `op` folded over the warp's lanes' values, from `init`.
template <class Op>
unsigned WarpReduce(unsigned v, unsigned init, Op op) {
  Cta* c = tl_cta;
  const int t = c->cur, w = t / 32;
  c->lanes[t] = v;
  Arrive(c->warp_gen[w], c->warp_count[w], 32);
  unsigned out = init;
  for (int l = 0; l < 32; ++l) out = op(out, unsigned(c->lanes[w * 32 + l]));
  Arrive(c->warp_gen[w], c->warp_count[w], 32);
  return out;
}
}  // namespace emu

// Every lane of the warp calls them (the mask is not modelled): the sum, AND, OR over the lanes.
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return emu::WarpReduce(v, 0u, [](unsigned x, unsigned y) { return x + y; });
}
inline unsigned __reduce_and_sync(unsigned, unsigned v) {
  return emu::WarpReduce(v, ~0u, [](unsigned x, unsigned y) { return x & y; });
}
inline unsigned __reduce_or_sync(unsigned, unsigned v) {
  return emu::WarpReduce(v, 0u, [](unsigned x, unsigned y) { return x | y; });
}

// Atomic across OS threads too: a cluster's CTAs run concurrently and may add into one peer's
// shared memory (distributed shared memory atomics).
template <class T>
T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T>
T atomicOr(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_or(v);
}
template <class T>
T atomicAnd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_and(v);
}

// The CTAs of a launch without clusters run one after another: their global stores are seen by
// every later one.
inline void __threadfence() {}
template <class T>
T __ldcg(const T* p) {
  return *p;
}

// No occupancy model on the CPU.
template <class F>
cudaError_t cudaOccupancyMaxActiveClusters(int* count, F, const cudaLaunchConfig_t*) {
  *count = 0;
  return cudaErrorInvalidValue;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }

template <class... P, class... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...),
                               A&&... args) {
  int cl = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      cl = int(config->attrs[i].val.clusterDim.x);
    }
  }
  const dim3 grid = config->gridDim;
  const unsigned block = config->blockDim.x;
  if (cl < 1 || grid.x % unsigned(cl) != 0 || block % 32 != 0 || config->blockDim.y != 1 ||
      config->blockDim.z != 1) {
    return cudaErrorInvalidValue;
  }
  std::function<void()> body = [&] { kernel(P(args)...); };
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned first = 0; first < grid.x; first += unsigned(cl)) {
        emu::Cluster cluster(cl);
        std::vector<std::thread> ctas;
        for (int r = 0; r < cl; ++r) {
          ctas.emplace_back([&, r] {
            blockIdx = dim3(first + unsigned(r), y, z);
            blockDim = config->blockDim;
            gridDim = grid;
            cluster.anchors[r] = &emu::tl_anchor;
            emu::Cta cta;
            cta.n = int(block);
            cta.body = body;
            cta.cluster = &cluster;
            cta.rank = r;
            cluster.os_barrier.ArriveAndWait();  // every anchor is known
            emu::RunCta(cta, config->dynamicSmemBytes);
          });
        }
        for (auto& t : ctas) t.join();
        if (const char* path = std::getenv("EMU_CLUSTER_SYNCS")) {
          long most = 0;
          for (const long e : cluster.exit_at) most = e > most ? e : most;
          if (FILE* f = std::fopen(path, "a")) std::fprintf(f, "%ld\n", most), std::fclose(f);
        }
        for (int r = 0; r < cl; ++r) {
          for (int q = 0; q < cl; ++q) {
            if (cluster.read_at[r][q] >= cluster.exit_at[q]) {
              std::fprintf(stderr,
                           "emu: CTA %d of a cluster read CTA %d's shared memory after its "
                           "cluster.sync #%ld, and CTA %d exited without another one\n",
                           r, q, cluster.read_at[r][q], q);
              std::abort();
            }
          }
        }
      }
    }
  }
  return cudaSuccess;
}
