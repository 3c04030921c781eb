// Exact top-k, filter first: one streaming pass per row chunk into a bounded shared-memory buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_topk_args.cuh"

namespace dsv41 {

// (key, position) pairs one CTA keeps in shared memory (96 KiB).
inline constexpr int64_t kFilterCapacity = 12288;
// Largest k: the buffer holds the k kept pairs plus one whole round of 8192 new ones.
inline constexpr int32_t kFilterMaxK = 4096;

// Split rows (a row over CTAs without a cluster, merged through global memory): at most this many
// unmasked rows, each with this many 32-bit words of TopkArgs::workspace.
inline constexpr int64_t kFilterSplitMaxRows = 32;
inline constexpr int64_t kFilterSplitRowWords = 64 + 2 * kFilterCapacity;

// Shared memory a masked call may add to the buffer (candidate bitmap + ordered block list).
inline constexpr int64_t kFilterMaskSmem = 100 * 1024;

// Bytes of that addition for rows of n positions, blocks of block_size and m members.
int64_t FilterTopkMaskBytes(int64_t n, int32_t block_size, int64_t num_members);

// One-time kernel attributes of the current device; call outside any stream capture.
cudaError_t PrepareFilterTopk();
// Same arguments and output as LaunchClusterTopk. With `members` (mode kPositions only) it reads
// only the candidate blocks' scores. Without, at most kFilterSplitMaxRows rows and a workspace of
// rows * kFilterSplitRowWords words, it may split each row over more CTAs than a cluster holds.
// cudaErrorInvalidValue when k > kFilterMaxK or the mask needs more than kFilterMaskSmem (the FFI
// handler rejects both first).
cudaError_t LaunchFilterTopk(const TopkArgs& args, cudaStream_t stream);

}  // namespace dsv41
