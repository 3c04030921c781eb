// The arguments every exact top-k select of cuda/ takes (cluster, filter-first, short-row): one
// layout for the three launchers, the FFI handlers and the CPU stand-in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

enum class TopkMode : int32_t {
  // Positions p < len of `scores[row, start + p]`: NaN / -inf / blocks outside `members` never
  // selected; ties by smaller position.
  kPositions = 0,
  // Candidate blocks b < nblocks = ceil(len / block_size) of block scores: the newest block is
  // always chosen, NaN / -inf blocks rank last but are chosen when needed.
  kCandidateBlocks = 1,
};

struct TopkArgs {
  const void* scores;      // [rows, n] float32, or bfloat16 when `bf16`
  const int32_t* lens;     // [rows] visible positions (kPositions) / row lengths (kCandidateBlocks)
  const int32_t* starts;   // [rows] column of position 0, or nullptr
  const int32_t* members;  // [rows, num_members] candidate block ids (any order), or nullptr
  int32_t* out;            // [rows, k] ascending, -1 padded
  int64_t rows, n, num_members;
  int32_t k, block_size;
  TopkMode mode;
  bool bf16;  // scores are bfloat16 (keys of their exact float32 values)
  // Scratch global memory a select may use (the filter select's split rows), or nullptr.
  uint32_t* workspace = nullptr;
  int64_t workspace_words = 0;
};

}  // namespace dsv41
