// The candidate table's entries (dsv41_jax.CandidateTable: the chosen blocks ascending, their
// physical slots, count and valid length), written by the sort that builds the table from block
// ids (smxx_sort_blocks.cu) and by the top-C select that writes it as it selects
// (smxx_short_topk.cu, ShortOutputs::table).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

// Where a short select writes a candidate table (ShortOutputs::table, ::every_block; blocks ==
// nullptr: none). Rows [rows, c].
struct TableOut {
  const int32_t* block_table;  // [rows, max_pages] the rows' page tables
  int32_t* blocks;             // [rows, c] ascending, kTablePad padded
  int32_t* count;              // [rows]
  int32_t* valid_lens;         // [rows]
  int32_t* physical;           // [rows, c] slot / block_size through the page table, -1 padded
  int64_t max_pages;
  int32_t page_size;
  int64_t c;  // the table's width (a top-C's: its k)
};

inline constexpr int32_t kTablePad = 0x7fffffff;

// The largest page id whose slots fit int32 (past it they would wrap to valid-looking ones).
__host__ __device__ __forceinline__ int32_t LargestPage(int32_t page_size) {
  return int32_t((int64_t(INT32_MAX) - page_size + 1) / page_size);
}

// Block b's physical slot through its row's page table `pages`: page b / spp at slot b % spp
// (spp blocks a page; a shift and a mask where spp_shift >= 0, V4.1's 64 / 8: divisions were
// most of the sort's emission time). A page id outside [0, largest] is no page: -1.
__device__ __forceinline__ int32_t PhysicalSlot(const int32_t* pages, int32_t b, int32_t spp,
                                                int32_t spp_shift, int32_t largest) {
  const int32_t page_of_b = spp_shift >= 0 ? b >> spp_shift : b / spp;
  const int32_t page = pages[page_of_b];
  return page < 0 || page > largest ? -1 : page * spp + (b - page_of_b * spp);
}

// log2 of the blocks a page where that is a power of two, else -1.
__host__ __device__ __forceinline__ int32_t SlotsShift(int32_t spp) {
  int32_t shift = 0;
  while ((1 << shift) < spp) ++shift;
  return (1 << shift) == spp ? shift : -1;
}

}  // namespace dsv41
