// Exact top-k by a radix select over a cluster of CTAs per row (SM90: thread block clusters).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_topk_args.cuh"

namespace dsv41 {

// One-time kernel attributes of the current device; call outside any stream capture.
cudaError_t PrepareClusterTopk();
cudaError_t LaunchClusterTopk(const TopkArgs& args, cudaStream_t stream);

}  // namespace dsv41
