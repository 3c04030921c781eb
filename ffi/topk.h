// The CUDA exact selects behind one entry point, for the top-k custom calls (ffi/topk.cc) and
// the fused indexer layers (ffi/sm90_indexer_layers.cu).
#pragma once

#include "common.h"
#include "smxx_cluster_topk.cuh"

namespace dsv41 {

// The select a call runs (the Python policy, dsv41_jax.topk.ffi.algorithm_for, picks it).
enum class Select : int32_t { kCluster = 0, kFilter = 1, kShort = 2 };

// InvalidArgument (naming `op`) when `select` cannot take rows of `n` scores with these
// attributes (k, block_size, mode, a mask of `num_members` blocks when `has_members`).
ffi::Error CheckTopk(const char* op, Select select, int64_t n, int64_t num_members,
                     bool has_members, int32_t k, int32_t block_size, int32_t mode);

// Launches `select` on `args` (checked by CheckTopk); the launch's error.
cudaError_t LaunchTopk(Select select, const TopkArgs& args, cudaStream_t stream);

}  // namespace dsv41
