// Counting sort over a per-row bitmap: one CTA per row sets a bit per selected block, scans
// the words' popcounts, and emits the set bits in order. O(nblocks / 32 + c) per row, no
// comparisons, and duplicates vanish for free.
#include "smxx_block_scan.cuh"
#include "smxx_sort_blocks.cuh"

namespace dsv41 {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int32_t kPad = 0x7fffffff;
// Page tables up to this many entries are staged in shared memory (64 KiB): the emit loop then
// looks pages up without a dependent global load per block.
constexpr int64_t kMaxStagedPages = 16384;

__global__ void __launch_bounds__(kThreads) SortCandidateBlocksKernel(SortBlocksArgs a,
                                                                      int64_t bitmap_words) {
  extern __shared__ uint32_t bitmap[];
  int32_t* staged = reinterpret_cast<int32_t*>(bitmap + bitmap_words);
  __shared__ int32_t warp_sums[kWarps];
  __shared__ int32_t total;
  const int64_t row = blockIdx.x;
  const int64_t cap = a.max_pages * a.page_size;
  const int64_t len = min(max(int64_t(a.lens[row]), int64_t(0)), cap);
  const int64_t nblocks = (len + a.block_size - 1) / a.block_size;
  const int64_t words = (nblocks + 31) / 32;

  for (int64_t w = threadIdx.x; w < words; w += kThreads) bitmap[w] = 0;
  const bool stage = a.max_pages <= kMaxStagedPages;
  const int32_t* row_pages = a.block_table + row * a.max_pages;
  const int64_t used_pages = (len + a.page_size - 1) / a.page_size;
  if (stage) {
    for (int64_t i = threadIdx.x; i < used_pages; i += kThreads) staged[i] = row_pages[i];
  }
  __syncthreads();
  const int32_t* sel = a.selected + row * a.c;
  for (int64_t i = threadIdx.x; i < a.c; i += kThreads) {
    const int32_t b = sel[i];
    if (b >= 0 && b < nblocks) atomicOr(&bitmap[b >> 5], 1u << (b & 31));
  }
  __syncthreads();

  // Each thread owns a contiguous run of words, so emitting in thread order is ascending.
  const int64_t per = (words + kThreads - 1) / kThreads;
  const int64_t w0 = min(int64_t(threadIdx.x) * per, words), w1 = min(w0 + per, words);
  int32_t mine = 0;
  for (int64_t w = w0; w < w1; ++w) mine += __popc(bitmap[w]);
  int32_t out = BlockExclusiveScan<kThreads>(mine, warp_sums, &total);
  const int32_t n = total;

  int32_t* blocks = a.blocks + row * a.c;
  int32_t* physical = a.physical + row * a.c;
  const int32_t* pages = stage ? staged : row_pages;
  const int32_t slots_per_page = a.page_size / a.block_size;
  for (int64_t w = w0; w < w1; ++w) {
    for (uint32_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
      const int32_t b = int32_t(w * 32 + __ffs(bits) - 1);
      const int64_t pos = int64_t(b) * a.block_size;
      const int32_t page = pages[pos / a.page_size];
      blocks[out] = b;
      physical[out] = page < 0 ? -1 : page * slots_per_page + int32_t(pos % a.page_size) / a.block_size;
      if (out == n - 1) {  // the table's last block: partial only if it is the newest block
        const int32_t tail = b == nblocks - 1 ? int32_t((len - 1) % a.block_size) + 1 : a.block_size;
        a.valid_lens[row] = a.block_size * (n - 1) + tail;
      }
      ++out;
    }
  }
  for (int64_t i = n + threadIdx.x; i < a.c; i += kThreads) {
    blocks[i] = kPad;
    physical[i] = -1;
  }
  if (threadIdx.x == 0) {
    a.count[row] = n;
    if (n == 0) a.valid_lens[row] = 0;
  }
}

}  // namespace

// Largest dynamic shared memory: the 2^20-block bitmap plus the staged page table.
constexpr size_t kMaxSortSmem = size_t(kMaxSortBlocks / 32 + kMaxStagedPages) * sizeof(uint32_t);

cudaError_t PrepareSortCandidateBlocks() {
  return cudaFuncSetAttribute(SortCandidateBlocksKernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSortSmem));
}

cudaError_t LaunchSortCandidateBlocks(const SortBlocksArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  const int64_t max_blocks = (args.max_pages * args.page_size + args.block_size - 1) / args.block_size;
  const int64_t words = (max_blocks + 31) / 32;
  const int64_t staged = args.max_pages <= kMaxStagedPages ? args.max_pages : 0;
  const size_t smem = size_t(words + staged) * sizeof(uint32_t);
  if (smem > kMaxSortSmem) return cudaErrorInvalidValue;
  SortCandidateBlocksKernel<<<unsigned(args.rows), kThreads, smem, stream>>>(args, words);
  return cudaGetLastError();
}

}  // namespace dsv41
