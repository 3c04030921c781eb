// Counting sort over a per-row bitmap: one CTA per row sets a bit per selected block, scans
// the words' popcounts, and emits the set bits in order. O(nblocks / 32 + c) per row, no
// comparisons, and duplicates vanish for free.
#include "smxx_bitmap.cuh"
#include "smxx_candidate_table.cuh"
#include "smxx_launch.cuh"
#include "smxx_sort_blocks.cuh"

namespace dsv41 {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
// Page tables up to this many entries are staged in shared memory (64 KiB): the emit loop then
// looks pages up without a dependent global load per block.
constexpr int64_t kMaxStagedPages = 16384;
// Global loads a thread keeps in flight at once. The kernel is latency-bound: a loop that loads
// one element, then consumes it, pays a full memory round trip per iteration.
constexpr int kBatch = 4;

// Calls use(i, src[i]) for i in [begin, end), kThreads * kBatch at a time with every load of a
// batch issued before any is consumed.
template <typename Use>
__device__ __forceinline__ void ForEachBatched(const int32_t* src, int64_t begin, int64_t end,
                                               Use use) {
  for (int64_t base = begin; base < end; base += kThreads * kBatch) {
    int32_t v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = base + j * kThreads + threadIdx.x;
      v[j] = i < end ? src[i] : 0;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = base + j * kThreads + threadIdx.x;
      if (i < end) use(i, v[j]);
    }
  }
}

// `spp_shift`: log2 of the blocks per page when that is a power of two, else -1.
__global__ void __launch_bounds__(kThreads)
    SortCandidateBlocksKernel(SortBlocksArgs a, int64_t bitmap_words, int32_t spp_shift) {
  const bool stage = a.max_pages <= kMaxStagedPages;
  // Dynamic shared memory: [bitmap | staged page table | the table's blocks | physical slots].
  extern __shared__ uint32_t bitmap[];
  int32_t* staged = reinterpret_cast<int32_t*>(bitmap + bitmap_words);
  int32_t* out_blocks = staged + (stage ? a.max_pages : 0);
  int32_t* out_physical = out_blocks + a.c;
  __shared__ int32_t warp_sums[kWarps];
  __shared__ int32_t total;
  const int64_t row = blockIdx.x;
  const int32_t* sel = a.selected == nullptr ? nullptr : a.selected + row * a.c;
  const int32_t* row_pages = a.block_table + row * a.max_pages;

  // First batch of ids and pages, issued together with the row's length: the common case
  // (C <= kThreads * kBatch, short page tables) needs one memory round trip in all.
  constexpr int64_t kFirst = int64_t(kThreads) * kBatch;
  const int32_t raw_len = a.lens[row];
  int32_t ids[kBatch], pages0[kBatch];
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int64_t i = j * kThreads + threadIdx.x;
    ids[j] = i >= a.c ? -1 : sel == nullptr ? int32_t(i) : sel[i];
    pages0[j] = stage && i < a.max_pages ? row_pages[i] : 0;
  }
  const int64_t cap = a.max_pages * a.page_size;
  // len < 2^31, so 32-bit unsigned arithmetic is exact (a 64-bit division is a far longer
  // instruction sequence).
  const uint32_t len = uint32_t(min(max(int64_t(raw_len), int64_t(0)), cap));
  const int64_t nblocks = (len + uint32_t(a.block_size) - 1) / uint32_t(a.block_size);
  const int64_t words = (nblocks + 31) / 32;
  const int64_t used_pages = (len + uint32_t(a.page_size) - 1) / uint32_t(a.page_size);

  for (int64_t w = threadIdx.x; w < words; w += kThreads) bitmap[w] = 0;
  if (stage) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = j * kThreads + threadIdx.x;
      if (i < used_pages) staged[i] = pages0[j];
    }
    ForEachBatched(row_pages, kFirst, used_pages, [&](int64_t i, int32_t v) { staged[i] = v; });
  }
  __syncthreads();  // bitmap cleared
  auto mark = [&](int32_t b) {
    if (b >= 0 && b < nblocks) atomicOr(&bitmap[b >> 5], 1u << (b & 31));
  };
#pragma unroll
  for (int j = 0; j < kBatch; ++j) mark(ids[j]);
  if (sel != nullptr) {
    ForEachBatched(sel, kFirst, a.c, [&](int64_t, int32_t b) { mark(b); });
  } else {
    for (int64_t b = kFirst + threadIdx.x; b < a.c; b += kThreads) mark(int32_t(b));
  }
  __syncthreads();

  // Emit into shared memory, then copy out coalesced (straight to global memory each warp's
  // stores would scatter over ~16 sectors; measured no faster either way on the H200).
  const int32_t* pages = stage ? staged : row_pages;
  const int32_t spp = a.page_size / a.block_size, largest = LargestPage(a.page_size);
  auto emit = [&](int32_t b, int32_t out, int32_t n) {
    const int32_t slot = PhysicalSlot(pages, b, spp, spp_shift, largest);  // the load first
    out_blocks[out] = b;
    out_physical[out] = slot;
    if (out == n - 1) {  // the table's last block: partial only if it is the newest block
      const int32_t tail =
          b == nblocks - 1 ? int32_t((len - 1) % uint32_t(a.block_size)) + 1 : a.block_size;
      a.valid_lens[row] = a.block_size * (n - 1) + tail;
    }
  };
  const int32_t n = ForEachSetBitInOrder<kThreads>(bitmap, words, warp_sums, &total, emit);
  __syncthreads();
  int32_t* blocks = a.blocks + row * a.c;
  int32_t* physical = a.physical + row * a.c;
  for (int64_t i = threadIdx.x; i < a.c; i += kThreads) {
    const bool used = i < n;
    blocks[i] = used ? out_blocks[i] : kTablePad;
    physical[i] = used ? out_physical[i] : -1;
  }
  if (threadIdx.x == 0) {
    a.count[row] = n;
    if (n == 0) a.valid_lens[row] = 0;
  }
}

}  // namespace

// Largest dynamic shared memory: the 2^20-block bitmap, the staged page table and the table.
constexpr size_t kMaxSortSmem =
    size_t(kMaxSortBlocks / 32 + kMaxStagedPages + 2 * kMaxSortCandidates) * sizeof(uint32_t);

cudaError_t PrepareSortCandidateBlocks() {
  return SetMaxDynamicSmem(kMaxSortSmem, SortCandidateBlocksKernel);
}

cudaError_t LaunchSortCandidateBlocks(const SortBlocksArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  const int64_t max_blocks =
      (args.max_pages * args.page_size + args.block_size - 1) / args.block_size;
  const int64_t words = (max_blocks + 31) / 32;
  const int64_t staged = args.max_pages <= kMaxStagedPages ? args.max_pages : 0;
  if (args.c > kMaxSortCandidates) return cudaErrorInvalidValue;
  const size_t smem = size_t(words + staged + 2 * args.c) * sizeof(uint32_t);
  if (smem > kMaxSortSmem) return cudaErrorInvalidValue;
  const int32_t spp_shift = SlotsShift(args.page_size / args.block_size);
  return LaunchKernel(SortCandidateBlocksKernel, dim3(unsigned(args.rows)), dim3(kThreads), smem,
                      stream, 0, args, words, spp_shift);
}

}  // namespace dsv41
