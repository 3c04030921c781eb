// Exact top-k for short rows: every key of a row held in registers, three digit passes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "smxx_candidate_table.cuh"
#include "smxx_topk_args.cuh"

namespace dsv41 {

// Scores one CTA holds in registers (1024 threads x 16).
inline constexpr int64_t kShortChunk = 16384;
// Most CTAs (one thread block cluster) per row: rows of at most kShortMaxCluster * kShortChunk
// scores (block scores in candidate-blocks mode).
inline constexpr int32_t kShortMaxCluster = 8;

// One-time kernel attributes of the current device; call outside any stream capture.
cudaError_t PrepareShortTopk();
// How many clusters of `cluster` CTAs of the kernel the current device runs at once (0 when it
// cannot tell): more rows than that run in waves. Outside any stream capture.
int32_t ShortTopkMaxActiveClusters(int32_t cluster);
// What the select writes beside (or in place of) its selection for the fused publish, in a
// kernel parameter of its own (the other selects' TopkArgs stay as small as they were).
struct ShortOutputs {
  // kPositions: each row's block maxima [rows, ceil(n / block_size)] written as well, the
  // block-amax kernel's with the newest block pinned (LaunchBlockAmax), or nullptr.
  float* block_max = nullptr;
  // kCandidateBlocks: the candidate table written in place of `out`, or blocks == nullptr.
  TableOut table = {};
  // kPositions: the candidate table of every block of each row written as well (blocks 0 ..
  // ceil(len / block_size) - 1, the length clamped to the page table: what the sort makes of
  // them), for the publish whose rows have at most C blocks (no block scores, no top-C, no
  // sort), or blocks == nullptr.
  TableOut every_block = {};
};

// Whether the select writes its rows' block maxima as well (ShortOutputs::block_max) for rows of n
// float scores in blocks of block_size: blocks of 8 (two lanes' tiles) and any row it takes.
// Such a call needs no block-amax kernel (LaunchBlockAmax).
bool ShortTopkWritesBlockMax(int64_t n, int32_t block_size);
// Whether the select writes a top-C's candidate table itself (ShortOutputs::table) for rows of n
// block scores of block_size positions, page tables of max_pages pages of page_size positions:
// a row of one CTA (n <= kShortChunk) whose page table covers exactly its n blocks and fits
// shared memory beside the select's. Such a call needs no sort (LaunchSortCandidateBlocks).
bool ShortTopkWritesTable(int64_t n, int32_t block_size, int64_t max_pages, int32_t page_size);
// Whether the select writes the table of every block (ShortOutputs::every_block) for rows of n
// scores, tables of c blocks of block_size positions and page tables of max_pages pages of
// page_size positions: rows of one CTA (n <= kShortChunk), c at most kMaxSortCandidates, pages
// of whole blocks and page tables of at most INT32_MAX positions. Such a call needs no sort
// (LaunchSortCandidateBlocks).
bool ShortTopkWritesEveryBlock(int64_t n, int64_t c, int32_t block_size, int64_t max_pages,
                               int32_t page_size);
// Same arguments and output as LaunchClusterTopk (both modes, starts, a candidate mask in
// kPositions mode). cudaErrorInvalidValue for rows wider than kShortMaxCluster * kShortChunk
// (the FFI handler rejects them first), and for a table (ShortOutputs::table) where
// ShortTopkWritesTable does not hold, or in another mode than kCandidateBlocks, bf16 or starts,
// and for block maxima (ShortOutputs::block_max) other than ShortTopkWritesBlockMax's, in another
// mode than kPositions, bf16, starts or members, and for the table of every block
// (ShortOutputs::every_block) other than ShortTopkWritesEveryBlock's or in another mode than
// kPositions, starts or members.
cudaError_t LaunchShortTopk(const TopkArgs& args, cudaStream_t stream,
                            const ShortOutputs& outputs = {});

}  // namespace dsv41
