// The published candidate table from selected block ids (any SM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

struct SortBlocksArgs {
  // [rows, c] block ids in any order, -1 / out of range / repeats dropped; nullptr: ids 0 .. c - 1
  // (every block of a row of at most c blocks: the table of a publish without a top-C)
  const int32_t* selected;
  const int32_t* lens;         // [rows] row lengths in positions
  const int32_t* block_table;  // [rows, max_pages]
  int32_t* blocks;             // [rows, c] ascending, INT32_MAX padded
  int32_t* count;              // [rows]
  int32_t* valid_lens;         // [rows]
  int32_t* physical;           // [rows, c] slot / block_size through the page table, -1 padded
  int64_t rows, c, max_pages;
  int32_t block_size, page_size;
};

// Largest row (in blocks) one CTA's bitmap covers: 2^20 blocks = 128 KiB of shared memory.
inline constexpr int64_t kMaxSortBlocks = int64_t(1) << 20;
// Largest table (C) the kernel stages in shared memory before writing it out: 32 KiB.
inline constexpr int64_t kMaxSortCandidates = 4096;

// One-time kernel attributes of the current device; call outside any stream capture.
cudaError_t PrepareSortCandidateBlocks();
cudaError_t LaunchSortCandidateBlocks(const SortBlocksArgs& args, cudaStream_t stream);

}  // namespace dsv41
