// A handler's launches replayed as one CUDA graph, cached by everything the launches read.
//
// A handler that launches many kernels pays the driver's launch cost for each on every call.
// When the same buffers and shapes come back (a serving loop's pipelined calls cycle through a
// few sets of XLA's buffers), one graph launch replays them all. The graph is recorded by
// capturing the launches on a stream kept for recording only (no work ever runs on it), then
// launched on XLA's stream, so XLA still orders everything. A miss records again into the
// least recently used slot of the device: in place (cudaGraphExecUpdate) when that slot's graph
// was recorded from the same layout (every shape, dtype and attribute: the same kernels with the
// same launch configurations, only pointers differ), else as a new instantiation. An update
// across layouts can report success and still replay the old node's launch attributes (a
// cluster kernel launched without its cluster), so it is never tried.
//
// Only for handlers XLA does not capture itself (no kCmdBufferCompatible trait): launching a
// graph while XLA captures the stream is illegal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "common.h"

namespace dsv41 {

class GraphCache {
 public:
  // A pipelined loop cycles through a few sets of XLA's buffers (outputs and temp move between
  // calls still in flight); each set is one graph.
  static constexpr int kGraphsPerDevice = 32;

  struct Stats {
    int64_t hits = 0, misses = 0;
  };

  // What the launches depend on: `layout` every shape, dtype and attribute (which kernels run,
  // with which launch configurations), `pointers` every buffer address.
  struct Key {
    std::vector<int64_t> layout, pointers;
    bool operator==(const Key&) const = default;
  };

  // Runs `launch(stream)` (an ffi::Error(cudaStream_t)) as the cached graph of `key`.
  template <class Launch>
  ffi::Error Run(const char* op, cudaStream_t stream, const Key& key, Launch&& launch) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= PerDevice::kMaxDevices) {
      return ffi::Error::Internal(std::string(op) + ": no current CUDA device");
    }
    Device& d = devices_[device];
    const uint64_t hash = Hash(key);
    std::lock_guard<std::mutex> lock(d.mu);
    ++d.clock;
    for (Entry& e : d.entries) {
      if (e.exec != nullptr && e.hash == hash && e.key == key) {
        e.used = d.clock;
        ++d.stats.hits;
        return CudaStatus(op, cudaGraphLaunch(e.exec, stream));
      }
    }
    ++d.stats.misses;
    if (d.recorder == nullptr) {
      if (auto e = CudaStatus(op, cudaStreamCreateWithFlags(&d.recorder, cudaStreamNonBlocking));
          e.failure()) {
        return e;
      }
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t began = cudaStreamBeginCapture(d.recorder, cudaStreamCaptureModeThreadLocal);
    if (auto e = CudaStatus(op, began); e.failure()) {
      return e;
    }
    ffi::Error launched = launch(d.recorder);
    const cudaError_t ended = cudaStreamEndCapture(d.recorder, &graph);
    if (launched.failure() || ended != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();  // the capture's error is reported here, not left for a later call
      return launched.failure() ? launched : CudaStatus(op, ended);
    }
    Entry& slot = Slot(d);
    cudaError_t err = cudaErrorUnknown;
    if (slot.exec != nullptr && slot.key.layout != key.layout) {
      cudaGraphExecDestroy(slot.exec);  // freed once its launches in flight complete
      slot.exec = nullptr;
    }
    if (slot.exec != nullptr) {
      cudaGraphExecUpdateResultInfo info;
      err = cudaGraphExecUpdate(slot.exec, graph, &info);
      if (err != cudaSuccess) {
        cudaGetLastError();
        cudaGraphExecDestroy(slot.exec);  // freed once its launches in flight complete
        slot.exec = nullptr;
      }
    }
    if (slot.exec == nullptr) err = cudaGraphInstantiate(&slot.exec, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      slot = Entry{};
      return CudaStatus(op, err);
    }
    slot.key = key;
    slot.hash = hash;
    slot.used = d.clock;
    return CudaStatus(op, cudaGraphLaunch(slot.exec, stream));
  }

  // Hits and misses on the current device since the process started.
  Stats CurrentStats() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= PerDevice::kMaxDevices) {
      return {};
    }
    std::lock_guard<std::mutex> lock(devices_[device].mu);
    return devices_[device].stats;
  }

 private:
  struct Entry {
    Key key;
    uint64_t hash = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;
  };
  struct Device {
    std::mutex mu;
    std::vector<Entry> entries;
    cudaStream_t recorder = nullptr;
    uint64_t clock = 0;
    Stats stats;
  };

  static uint64_t Hash(const Key& key) {  // FNV-1a over the words
    uint64_t h = 1469598103934665603ull;
    for (const auto* words : {&key.layout, &key.pointers}) {
      for (int64_t v : *words) h = (h ^ uint64_t(v)) * 1099511628211ull;
    }
    return h;
  }

  static Entry& Slot(Device& d) {
    if (d.entries.size() < kGraphsPerDevice) return d.entries.emplace_back();
    Entry* oldest = &d.entries[0];
    for (Entry& e : d.entries) {
      if (e.used < oldest->used) oldest = &e;
    }
    return *oldest;
  }

  // Never destroyed: graphs and streams outlive the process's last call (destroying them at
  // exit would race the CUDA context's own teardown).
  Device devices_[PerDevice::kMaxDevices];
};

}  // namespace dsv41
