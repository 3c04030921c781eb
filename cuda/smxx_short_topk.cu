// Exact top-k for short rows (up to 8 x 16384 scores): a row is split over a cluster of 1-8 CTAs
// of 1024 threads, and each thread loads 16 scores of its CTA's chunk once, as order-preserving
// keys held in registers. Nothing is buffered and the row is never read again:
//   - pass 1 (the keys' top 11 bits) counted into shared-memory histograms: every CTA adds its
//     nonzero counts into every CTA's sums through distributed shared memory, so each holds
//     the cluster's histogram, finds the k-th key's digit and takes the same branches;
//   - then each CTA's candidates (its keys in that digit's bin and above: about k plus one bin
//     of the row) meet in rank 0 (GatherSelect), which takes passes 2 and 3 (11 and 10 bits)
//     and the output alone: the sparse consumer's on-chip select (smxx_onchip_select.cuh);
//   - a row whose candidates do not fit takes passes 2 and 3 over the cluster as pass 1, and
//     the output in position order from one block scan of per-tile counts of keys above the
//     k-th and equal to it (the first ties by position), offset by the counts of the cluster's
//     lower-ranked CTAs: no buffer, no sort.
// Latency, not bytes, bounds short rows: one dependent load, one cluster-wide histogram pass and
// one cluster barrier, where the filter and cluster selects pay four-pass cuts or cluster-wide
// passes over global memory. A row of one CTA (at most kShortChunk scores) is issue-bound: each
// of its 32 warps' instructions costs the SM 8 cycles, so it takes pass 1 over its keys in
// registers and then the on-chip select, whose passes 2 and 3 and output read only the
// candidates (~1K of 16K).
#include <cooperative_groups.h>

#include "smxx_bitmap.cuh"
#include "smxx_block_scan.cuh"
#include "smxx_candidate_table.cuh"
#include "smxx_onchip_select.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_short_topk.cuh"
#include "smxx_sort_blocks.cuh"
#include "smxx_topk_keys.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = int(kShortChunk / kThreads);  // keys per thread
constexpr int kSegment = 32 * kPer;                // a warp's consecutive scores
constexpr int kBins = 2048;                        // the widest digit: 11 bits
// The scores of a CTA that holds one tile (a 16-byte load) a lane, and the tiles a lane that
// hold kShortChunk scores.
template <class T>
constexpr int64_t kTileRow = kThreads * (16 / int64_t(sizeof(T)));
template <class T>
constexpr int kFullTiles = int(kShortChunk / kTileRow<T>);
// A chunk's candidate bitmap: at block size 1 one bit per score, plus the straddling ends.
constexpr int kMaskWords = int(kShortChunk / 32) + 2;
// The candidates a row of a cluster may gather into its rank 0 (GatherSelect).
constexpr int32_t kGather = 8192;
static_assert(kShortChunk % kThreads == 0 && kPer % 8 == 0, "whole 16-byte vectors per thread");
using topk::kExcluded;

struct Shared {
  uint32_t hist[3][kBins];  // this CTA's counts, one array a pass (zeroed once, at the start)
  uint32_t sum[3][kBins];   // the cluster's counts (clusters of 2 or more): the peers add in
  int32_t warp_sums[kWarps];
  int32_t scan_total;
  int32_t bin, above, in_bin;  // the pass's digit, the keys above its bin, the keys in it
  int32_t counts;              // this CTA's keys above the k-th | equal to it << 16 (peers read)
  uint32_t excluded[32];  // where the lanes count pass 1's excluded keys (never read or zeroed)
  uint32_t member_bits[kMaskWords];
  // GatherSelect: the warps' candidates, a CTA's outgrew its region (peers set it); rank 0's
  // on-chip select, the CTAs' candidates (peers store) and their keys and positions
  int32_t warp_kept[kWarps], overflow, region_kept[kShortMaxCluster];
  onchip::Shared select;
  alignas(16) uint32_t gather_keys[kGather];
  alignas(16) int32_t gather_positions[kGather];
};

struct Digit {
  int32_t bin, above, in_bin, total;
};

// Pass 1's counts of a thread's keys: each key's top 11 bits (its digit) counted in `counts`,
// an excluded key in `lane_dump` (the lane's word of a dump never read): no branch a key, where
// `if (key) atomicAdd` compiles to a branch and a convergence barrier around each atomic.
template <int kKeys>
__device__ __forceinline__ void CountTopDigits(uint32_t* counts, uint32_t* lane_dump,
                                               const uint32_t (&key)[kKeys]) {
#pragma unroll
  for (int i = 0; i < kKeys; ++i) {
    atomicAdd(key[i] != kExcluded ? &counts[key[i] >> 21] : lane_dump, 1u);
  }
}

// One digit pass over the keys whose bits above kShift + kWidth equal `prefix`: the bin (digit)
// holding the k_rem-th largest of them, the keys above that bin and in it, and how many keys
// took part (over the whole cluster). All threads of all the cluster's CTAs call it.
// `warp_has_keys`: whether the warp's segment starts inside the chunk (else its keys are all
// excluded, and its count is skipped: warp-uniform).
template <int kShift, int kWidth>
__device__ Digit DigitPass(Shared& sh, const uint32_t (&key)[kPer],
                           const cg::cluster_group& cluster, int cl, uint32_t prefix, int32_t k_rem,
                           bool warp_has_keys) {
  constexpr int kDigits = 1 << kWidth, kDigitsPer = kDigits / kThreads;
  constexpr int kPass = kShift == 21 ? 0 : kShift == 10 ? 1 : 2;
  static_assert(kDigits <= kBins && kDigitsPer >= 1);
  uint32_t* h = sh.hist[kPass];
  if constexpr (kPass == 0) {
    static_assert(kShift + kWidth == 32, "the digit is the key's top bits");
    if (warp_has_keys) CountTopDigits(h, &sh.excluded[int(threadIdx.x) % 32], key);
  } else if (warp_has_keys) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const bool in = key[i] != kExcluded && (key[i] >> (kShift + kWidth)) == prefix;
      if (in) atomicAdd(&h[(key[i] >> kShift) & (kDigits - 1)], 1u);
    }
  }
  __syncthreads();
  if (kPass == 0) DSV41_STAMP(10);
  if (cl > 1) {
    // Each CTA adds its nonzero counts into every CTA's sums (its own included): a pass's keys
    // fall in few digits, so few words cross the cluster, and each CTA then reads the
    // cluster's histogram from its own shared memory.
    uint32_t* s = sh.sum[kPass];
    for (int d = int(threadIdx.x); d < kDigits; d += kThreads) {
      const uint32_t c = h[d];
      if (c != 0) {
        for (int r = 0; r < cl; ++r) atomicAdd(cluster.map_shared_rank(s, r) + d, c);
      }
    }
    cluster.sync();
    if (kPass == 0) DSV41_STAMP(15);
    h = s;
  }
  // Thread t holds digits kDigits - 1 - t * kDigitsPer - j, descending: its exclusive scan is the
  // count of keys in the bins above its own.
  // Its own scan, not BlockFindDigit: the hit's fields stored in the loop, not returned and
  // stored after it (faster at every short-select shape on the H100, BENCHMARKS_HISTORY.md).
  int32_t c[kDigitsPer], mine = 0;
#pragma unroll
  for (int j = 0; j < kDigitsPer; ++j) {
    const int32_t v = int32_t(h[kDigits - 1 - (int(threadIdx.x) * kDigitsPer + j)]);
    c[j] = v, mine += v;
  }
  int32_t above = BlockExclusiveScan<kThreads>(mine, sh.warp_sums, &sh.scan_total);
#pragma unroll
  for (int j = 0; j < kDigitsPer; ++j) {
    if (above < k_rem && k_rem <= above + c[j]) {
      sh.bin = kDigits - 1 - (int(threadIdx.x) * kDigitsPer + j);
      sh.above = above, sh.in_bin = c[j];
    }
    above += c[j];
  }
  __syncthreads();
  return Digit{sh.bin, sh.above, sh.in_bin, sh.scan_total};
}

// The chunk's scores as float, tile j of the thread whose first element is `seg` holding chunk
// elements seg + 32 * kVec * j + [0, kVec) (a warp's load reads 32 * kVec contiguous scores),
// NoScore past the chunk's end (r.hi). The loads wait for the row's length (issued before it,
// over the chunk's whole width, they were slower on the H100: BENCHMARKS_HISTORY.md).
template <class T, int kTiles, int kVec>
__device__ __forceinline__ void LoadTiles(const topk::Row<T>& r, int64_t seg,
                                          float (&v)[kTiles][kVec]) {
  const int64_t mine = r.hi - r.lo;
  const bool aligned = topk::Aligned(r);
  if (aligned && seg + 32 * kVec * (kTiles - 1) + kVec <= mine) {  // one check, not one a tile
#pragma unroll
    for (int j = 0; j < kTiles; ++j) topk::LoadWholeScores<kVec>(r, seg + 32 * kVec * j, v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      topk::LoadScores<kVec>(r, mine, seg + 32 * kVec * j, aligned, v[j]);
  }
}

// The block maxima of a CTA's chunk (ShortOutputs::block_max) from the scores its threads loaded
// (LoadTiles: v[j] the row's elements base + 32 * kVec * j + [0, kVec), base = the chunk's start
// + the thread's segment, NoScore past the row's length): a block of 8 is an even lane's tile
// and the next lane's. Each block's max as LaunchBlockAmax takes it (the first of the largest
// scores in position order, NaN never, -inf where none; the newest block +inf), written where
// it lies in the chunk (`chunk` scores from the row's element base - seg) and the row's n.
template <int kTiles>
__device__ __forceinline__ void WriteBlockMax(const TopkArgs& a, float* block_max, int64_t row,
                                              int64_t len, int64_t chunk_lo, int64_t chunk,
                                              int64_t seg, const float (&v)[kTiles][4]) {
  static_assert(kShortChunk % 8 == 0 && kSegment % 8 == 0, "chunks of whole blocks");
  const int64_t nb = (a.n + 7) / 8, newest = (len + 7) / 8 - 1;
  const bool even = threadIdx.x % 2 == 0;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    float best = -INFINITY;
#pragma unroll
    for (int e = 0; e < 4; ++e) best = v[j][e] > best ? v[j][e] : best;  // NaN: false
    // The block's last four, from the odd lane.
    const float later = __shfl_sync(0xffffffffu, best, int(threadIdx.x % 32) | 1);
    const int64_t at = seg + 32 * 4 * j, b = (chunk_lo + at) / 8;
    if (even && at < chunk && b < nb) {
      block_max[row * nb + b] = b == newest ? INFINITY : later > best ? later : best;
    }
  }
}

// The keys of a thread's tiles (v from topk::LoadScores at chunk elements seg + 32 * kVec * j).
// Where every position may be selected (kPositions without a candidate bitmap) a score's key is
// its PositionKey alone: LoadScores left NoScore, never selected, past the chunk.
template <class T, int kTiles, int kVec>
__device__ __forceinline__ void TileKeys(const TopkArgs& a, const topk::Row<T>& r, int64_t mine,
                                         int64_t seg, const float (&v)[kTiles][kVec],
                                         uint32_t (&key)[kTiles * kVec]) {
  if (a.mode == TopkMode::kPositions && r.member_bits == nullptr) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) key[kVec * j + e] = topk::PositionKey(v[j][e]);
    }
    return;
  }
  if (a.mode == TopkMode::kCandidateBlocks) {      // KeyOf's, by the thread's offsets in 32 bits
    constexpr int64_t kSpan = 32 * kTiles * kVec;  // past the thread's last element
    const int32_t left = int32_t(min(max(mine - seg, int64_t(0)), kSpan));
    const int64_t pin = r.newest - r.lo - seg;  // the newest block's offset
    const int32_t pinned = pin >= 0 && pin < kSpan ? int32_t(pin) : -1;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int32_t i = 32 * kVec * j + e;
        const float x = v[j][e];
        const uint32_t kk = x > -INFINITY ? topk::OrderedKey(x) : topk::kLowest;
        key[kVec * j + e] = i >= left ? kExcluded : i == pinned ? topk::kPinned : kk;
      }
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    uint32_t kk[kVec];
    topk::ScoresToKeys<kVec>(a, r, mine, seg + 32 * kVec * j, v[j], kk);
#pragma unroll
    for (int e = 0; e < kVec; ++e) key[kVec * j + e] = kk[e];
  }
}

// A row of one CTA: its keys in shared memory for the on-chip select, and its pass-1 counts.
struct CtaShared {
  onchip::Shared select;
  uint32_t counts[kBins + onchip::kGroups];  // a digit's count a word, then the groups' (SumGroups)
  uint32_t keys[kShortChunk];
  uint32_t member_bits[kMaskWords];
  uint32_t excluded[32];  // where the lanes count pass 1's excluded keys (never read or zeroed)
};
static_assert(kShortChunk == onchip::kMaxRow && kBins == onchip::kBins);

// c += add where key >= lowest: a compare and a predicated add (the compiler's select takes
// three instructions).
__device__ __forceinline__ void AddIfAtLeast(uint32_t& c, uint32_t key, uint32_t lowest,
                                             uint32_t add) {
#if defined(__CUDA_ARCH__)
  asm("{\n\t.reg .pred p;\n\tsetp.ge.u32 p, %1, %2;\n\t@p add.u32 %0, %0, %3;\n\t}"
      : "+r"(c)
      : "r"(key), "r"(lowest), "r"(add));
#else
  if (key >= lowest) c += add;
#endif
}

// A lane's next candidate slot in this CTA's shared memory (TileCandidates::Write; no other
// pointer: the address is a shared-window offset), advanced past each candidate stored: a
// compare, predicated stores and a predicated add a key, where the compiler's `if` and slot
// count take six instructions.
class SlotCursor {
 public:
  __device__ __forceinline__ explicit SlotCursor(int32_t* slot) : at_(Address(slot)) {}
  // Where key > above: `value` into the slot, (kSecond > 0) `second` kSecond bytes past it,
  // and the cursor to the next slot.
  template <int kSecond>
  __device__ __forceinline__ void PutIfAbove(uint32_t key, uint32_t above, uint32_t value,
                                             uint32_t second) {
#if defined(__CUDA_ARCH__)
    if constexpr (kSecond == 0) {
      asm volatile(
          "{\n\t.reg .pred p;\n\tsetp.gt.u32 p, %1, %2;\n\t@p st.shared.u32 [%0], %3;\n\t"
          "@p add.u32 %0, %0, 4;\n\t}"
          : "+r"(at_)
          : "r"(key), "r"(above), "r"(value)
          : "memory");
    } else {
      asm volatile(
          "{\n\t.reg .pred p;\n\tsetp.gt.u32 p, %1, %2;\n\t@p st.shared.u32 [%0], %3;\n\t"
          "@p st.shared.u32 [%0+%5], %4;\n\t@p add.u32 %0, %0, 4;\n\t}"
          : "+r"(at_)
          : "r"(key), "r"(above), "r"(value), "r"(second), "n"(kSecond)
          : "memory");
    }
#else
    if (key > above) {
      *reinterpret_cast<uint32_t*>(at_) = value;
      if constexpr (kSecond > 0) *reinterpret_cast<uint32_t*>(at_ + kSecond) = second;
      at_ += 4;
    }
#endif
  }

 private:
#if defined(__CUDA_ARCH__)
  uint32_t at_;
  __device__ __forceinline__ static uint32_t Address(int32_t* p) {
    return uint32_t(__cvta_generic_to_shared(p));
  }
#else
  char* at_;
  static char* Address(int32_t* p) { return reinterpret_cast<char*>(p); }
#endif
};

// A warp's candidates for the on-chip select from the keys its lanes hold (TileKeys): lane l's
// tile j holds the chunk's elements lo + 32 kVec j + kVec l + [0, kVec), lo the warp's first.
// Each tile's counts scanned over the lanes at once, packed in fields of 32 / kTiles bits (16
// for one tile; a tile's count is at most 32 kVec < 2^kBits): no ballots, no popcounts (each a
// quarter of the SM's issue rate), no shared-memory reload of the keys.
template <int kVec, int kTiles = kPer / kVec>
struct TileCandidates {
  static constexpr int kBits = 32 / (kTiles > 1 ? kTiles : 2);
  static_assert(32 * kVec < (1 << kBits), "a tile's count fits its field");
  static constexpr uint32_t kMask = (1u << kBits) - 1u;
  int32_t lo;
  const uint32_t (&key)[kTiles * kVec];
  // The lane's tiles' counts of keys >= lowest scanned over the warp: the lanes' before it
  // (`before`) and the warp's (`tiles`), a field a tile.
  struct Scan {
    uint32_t before, tiles;
  };
  __device__ __forceinline__ Scan Count(uint32_t lowest) const {
    uint32_t c = 0;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) AddIfAtLeast(c, key[kVec * j + e], lowest, 1u << (kBits * j));
    }
    const uint32_t inclusive = WarpInclusiveScan(c);  // unsigned: the fields fill 32 bits
    return Scan{inclusive - c, __shfl_sync(0xffffffffu, inclusive, 31)};
  }
  // The warp's candidates (every lane).
  __device__ __forceinline__ static int32_t Total(const Scan& s) {
    int32_t count = 0;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) count += int32_t((s.tiles >> (kBits * j)) & kMask);
    return count;
  }
  // Each of the warp's candidates (keys >= lowest, lowest >= 1: onchip::First::Lowest), in
  // position order, from slot `base` of `slots` up: position p0 + i (i its element of the
  // warp's segment), or (kSecond > 0) its key there and p0 + i kSecond bytes past it. The
  // compare is `> lowest - 1`, not Count's `>= lowest`: the same compare would be shared, and
  // ptxas parks the 16 predicates in a register mask and unpacks them one instruction each.
  template <int kSecond>
  __device__ __forceinline__ void Write(const Scan& s, uint32_t lowest, int32_t* slots,
                                        int32_t base, int32_t p0) const {
    const int lane = int(threadIdx.x) % 32;
    int32_t count = 0;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      SlotCursor at(slots + base + count + int32_t((s.before >> (kBits * j)) & kMask));
      const int32_t p = p0 + 32 * kVec * j + kVec * lane;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const uint32_t kk = key[kVec * j + e];
        if constexpr (kSecond == 0) {
          at.PutIfAbove<0>(kk, lowest - 1, uint32_t(p + e), 0u);
        } else {
          at.PutIfAbove<kSecond>(kk, lowest - 1, kk, uint32_t(p + e));
        }
      }
      count += int32_t((s.tiles >> (kBits * j)) & kMask);
    }
  }
  __device__ __forceinline__ int32_t Keep(onchip::Shared& sh, uint32_t lowest) const {
    const Scan s = Count(lowest);
    Write<0>(s, lowest, sh.list, lo, lo);
    __syncwarp();  // the warp's lanes read each other's
    return Total(s);
  }
};

// Position i of a one-CTA row's chunk: the chunk starts at the row's (start) position 0.
struct ChunkPositions {
  __device__ __forceinline__ int32_t operator()(int32_t i) const { return i; }
};

// A top-C row's output as its candidate table (ShortOutputs::table; onchip::PositionsOut's
// interface): slot s the s-th chosen block and its physical slot through the row's page table
// (staged in shared memory), kTablePad / -1 past the n chosen, then the count and the valid
// length, as the sort (smxx_sort_blocks.cu) builds them from the ids. The newest block is pinned
// and the row's largest: where any block is chosen it is the last, and only it may be partial.
struct TableSink {
  int32_t* __restrict__ blocks;
  int32_t* __restrict__ physical;
  const int32_t* __restrict__ pages;  // the row's page table, staged
  int32_t* __restrict__ count;
  int32_t* __restrict__ valid_len;
  int32_t len, block_size, spp, spp_shift, largest;  // len: the row's positions, clamped
  __device__ __forceinline__ void Put(int32_t slot, int32_t b) const {
    const int32_t slot_of_b = PhysicalSlot(pages, b, spp, spp_shift, largest);  // the load first
    blocks[slot] = b;
    physical[slot] = slot_of_b;
  }
  __device__ __forceinline__ void Pad(int32_t slot) const {
    blocks[slot] = kTablePad, physical[slot] = -1;
  }
  __device__ __forceinline__ void Finish(int32_t n) const {
    *count = n;
    *valid_len = n == 0 ? 0 : block_size * (n - 1) + (len - 1) % block_size + 1;
  }
};

// A row's table of every block (ShortOutputs::every_block): blocks 0 .. n - 1 and their
// physical slots through the row's page table, kTablePad / -1 past them, the count and the valid
// length, n = min(ceil(len / block_size), c) with len clamped to the page table, as the sort
// builds them from ids 0 .. c - 1 (the launch checked the shapes).
__device__ __forceinline__ void WriteEveryBlock(const TableOut& t, int64_t row, int32_t raw_len,
                                                int32_t block_size) {
  const int64_t cap = t.max_pages * t.page_size;
  const int32_t len = int32_t(min(max(int64_t(raw_len), int64_t(0)), cap));
  const int32_t nblocks = len / block_size + (len % block_size != 0);
  const int32_t n = int32_t(min(int64_t(nblocks), t.c)), spp = t.page_size / block_size;
  const int32_t shift = SlotsShift(spp), largest = LargestPage(t.page_size);
  const int32_t* pages = t.block_table + row * t.max_pages;
  for (int32_t i = int32_t(threadIdx.x); i < t.c; i += kThreads) {
    const bool used = i < n;
    const int32_t slot = used ? PhysicalSlot(pages, i, spp, shift, largest) : -1;
    t.blocks[row * t.c + i] = used ? i : kTablePad;
    t.physical[row * t.c + i] = slot;
  }
  if (threadIdx.x == 0) {
    t.count[row] = n;
    const int32_t tail = n == nblocks ? (len - 1) % block_size + 1 : block_size;
    t.valid_lens[row] = n == 0 ? 0 : block_size * (n - 1) + tail;
  }
}

// Most pages a row's table stages (kTable): CtaShared and they fit an SM's shared memory. A
// thread loads kTablePagesEarly of them with the scores (V4.1's 2048 a 128K row), the rest later.
constexpr int64_t kMaxTablePages = 16384;
constexpr int kTablePagesEarly = 2;
static_assert(sizeof(CtaShared) + kMaxTablePages * sizeof(int32_t) <= 227 * 1024, "an SM's");

// A row of at most kTiles * kTileRow<T> scores on one CTA, kTiles tiles of kVec scores a lane
// (warp w takes the chunk's scores [w span, (w + 1) span), span = 32 kVec kTiles): each thread
// loads and keys them, stores them for the on-chip select and counts their pass-1 digits; the
// on-chip select does the rest, each warp's candidates kept from its lanes' keys
// (TileCandidates). Launch picks the fewest tiles that hold the chunk: a row of 2K-8K scores
// then keeps all 32 warps busy (4 or 8 keys a lane, where 16 leave most warps idle and the
// candidates on a few), and each tile count is its own kernel: a lane holds and counts only
// its taken keys, and the 16K rows' kernel is the one of full tiles (a tile count chosen at run
// time cost the 16K rows time on the H100, BENCHMARKS_HISTORY.md).
// kTable: a top-C row's output is its candidate table (TableSink; the row's page table staged
// after CtaShared).
template <class T, int kTiles, bool kTable = false>
__global__ void __launch_bounds__(kThreads, 1)
    ShortTopkCtaKernel(TopkArgs a, int64_t chunk, ShortOutputs x) {
  extern __shared__ uint32_t dyn[];  // dynamic: the CPU stand-in starts it as garbage
  CtaShared& sh = *reinterpret_cast<CtaShared*>(dyn);
  const int64_t row = blockIdx.x;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  DSV41_STAMP(0);
  constexpr int kVec = 16 / int(sizeof(T)), kSpan = 32 * kVec * kTiles, kKeys = kTiles * kVec;
  const int64_t seg = int64_t(warp) * kSpan + lane * kVec;
  float v[kTiles][kVec];
  topk::Row<T> r = topk::RowChunk<T>(a, row, chunk, 0);
  LoadTiles<T>(r, seg, v);
  const int64_t mine = r.hi - r.lo;
  // The table of every block needs only the page table: written while the scores load.
  if (x.every_block.blocks != nullptr)
    WriteEveryBlock(x.every_block, row, a.lens[row], a.block_size);
  // kTable: the row's page table, its first kTablePagesEarly pages a thread loaded here and
  // staged once the keys are (the loads in flight meanwhile).
  int32_t* const staged_pages = reinterpret_cast<int32_t*>(&sh + 1);
  const int32_t* row_pages = nullptr;
  int32_t len = 0, pages = 0, early[kTablePagesEarly];
  if constexpr (kTable) {
    row_pages = x.table.block_table + row * x.table.max_pages;
    const int64_t cap = x.table.max_pages * x.table.page_size;  // the launch checked it
    len = int32_t(min(max(int64_t(a.lens[row]), int64_t(0)), cap));
    pages = (len + x.table.page_size - 1) / x.table.page_size;
#pragma unroll
    for (int j = 0; j < kTablePagesEarly; ++j) {
      const int32_t i = int32_t(threadIdx.x) + j * kThreads;
      early[j] = i < pages ? row_pages[i] : 0;
    }
  }
  static_assert(kBins == 2 * kThreads);
  sh.counts[threadIdx.x] = 0, sh.counts[kThreads + threadIdx.x] = 0;
  if (a.members != nullptr) {  // the candidate blocks of the row (it synchronises)
    const int64_t b1 = (r.hi + a.block_size - 1) / a.block_size;
    MarkIds<kThreads>(sh.member_bits, 0, b1, a.members + row * a.num_members, a.num_members);
    r.member_bits = sh.member_bits, r.member_base = 0;
  } else {
    __syncthreads();
  }
  uint32_t key[kKeys];
  if constexpr (kVec == 4) {
    if (x.block_max != nullptr) WriteBlockMax<kTiles>(a, x.block_max, row, r.len, 0, chunk, seg, v);
  }
  TileKeys<T>(a, r, mine, seg, v, key);
  DSV41_STAMP(2);
#pragma unroll
  for (int q = 0; q < kKeys / 4; ++q) {  // tile j's keys are chunk elements seg + 32 * kVec * j + e
    const int j = 4 * q / kVec, e = 4 * q % kVec;
    *reinterpret_cast<uint4*>(&sh.keys[seg + 32 * kVec * j + e]) =
        make_uint4(key[4 * q], key[4 * q + 1], key[4 * q + 2], key[4 * q + 3]);
  }
  if (int64_t(warp) * kSpan < mine) CountTopDigits(sh.counts, &sh.excluded[lane], key);
  if constexpr (kTable) {  // the page table staged before the select's barriers
#pragma unroll
    for (int j = 0; j < kTablePagesEarly; ++j) {
      const int32_t i = int32_t(threadIdx.x) + j * kThreads;
      if (i < pages) staged_pages[i] = early[j];
    }
    for (int32_t i = int32_t(threadIdx.x) + kTablePagesEarly * kThreads; i < pages; i += kThreads)
      staged_pages[i] = row_pages[i];
  }
  __syncthreads();
  DSV41_STAMP(4);
  onchip::SumGroups<kThreads>(sh.counts);
  __syncthreads();
  DSV41_STAMP(1);
  const TileCandidates<kVec, kTiles> candidates{warp * kSpan, key};
  if constexpr (kTable) {
    const TableOut& t = x.table;
    const int32_t spp = t.page_size / a.block_size;
    const TableSink sink{t.blocks + row * a.k, t.physical + row * a.k,
                         staged_pages,         t.count + row,
                         t.valid_lens + row,   len,
                         a.block_size,         spp,
                         SlotsShift(spp),      LargestPage(t.page_size)};
    onchip::SelectToPositions<kThreads, false>(sh.select, sh.keys, sh.counts, candidates, a.k,
                                               sink);
  } else {
    onchip::SelectToPositions<kThreads, false>(
        sh.select, sh.keys, sh.counts, candidates, a.k,
        onchip::PositionsOut<ChunkPositions>{ChunkPositions{}, a.out + row * int64_t(a.k)});
  }
  DSV41_STAMP(15);
}

// Rank 0's gathered candidates (GatherSelect), every one at or above the k-th key's pass-1 bin:
// CTA r's `region_kept[r]` from column r * room, in position order. Warp w keeps the kept
// candidates [w seg, (w + 1) seg) of the `kept` over all regions, no key compared.
struct GatheredKeys {
  int32_t lo, n, room, cl;
  const int32_t* region_kept;
  __device__ __forceinline__ GatheredKeys(int32_t kept, int32_t room_, int cl_,
                                          const int32_t* region_kept_)
      : room(room_), cl(cl_), region_kept(region_kept_) {
    const int32_t seg = (kept + kThreads - 1) / kThreads * 32, warp = int32_t(threadIdx.x) / 32;
    lo = min(warp * seg, kept), n = min(lo + seg, kept) - lo;
  }
  __device__ __forceinline__ int32_t Keep(onchip::Shared& sh, uint32_t) const {
    for (int32_t t = int32_t(threadIdx.x) % 32; t < n; t += 32) {
      int32_t i = lo + t, r = 0;
      while (r < cl - 1 && i >= region_kept[r]) i -= region_kept[r], ++r;
      sh.list[lo + t] = r * room + i;
    }
    __syncwarp();  // the warp's lanes read each other's
    return n;
  }
};

struct GatheredPositions {
  const int32_t* positions;
  __device__ __forceinline__ int32_t operator()(int32_t i) const { return positions[i]; }
};

// A row of 2-8 CTAs whose candidates (its keys at or above the k-th key's pass-1 bin, from pass
// 1's `first`: `kept` <= kGather over the cluster) may fit one CTA: every CTA stores its
// candidates' keys and positions, in position order, into its region of rank 0's shared memory
// (kGather / cl of them), and rank 0 takes passes 2 and 3 and the output alone, on chip
// (onchip::SelectFromFirst). One cluster barrier, where the cluster-wide passes pay a histogram
// exchange and a barrier each and the output two more. Returns false (every CTA) where a CTA's
// candidates outgrow its region: the row takes the cluster-wide passes. Every thread of the
// cluster calls it.
template <int kVec>
__device__ bool GatherSelect(Shared& sh, const uint32_t (&key)[kPer],
                             const cg::cluster_group& cluster, int cl, int rank, int64_t chunk_lo,
                             const onchip::First& first, int32_t kept, int32_t k, int32_t* out) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const uint32_t lowest = first.Lowest(k);
  const TileCandidates<kVec> mine{warp * kSegment, key};
  const auto scan = mine.Count(lowest);
  if (lane == 0) sh.warp_kept[warp] = mine.Total(scan);
  __syncthreads();
  static_assert(kWarps == 32, "a lane a warp's count");
  const uint32_t warp_kept = uint32_t(sh.warp_kept[lane]);
  const int32_t base = int32_t(__reduce_add_sync(0xffffffffu, lane < warp ? warp_kept : 0u));
  const int32_t count = int32_t(__reduce_add_sync(0xffffffffu, warp_kept));
  DSV41_STAMP(3);
  const int32_t room = kGather / cl / 4 * 4;  // whole 16-byte vectors
  if (count <= room) {
    // Staged in this CTA's own arrays (rank 0's are its region), then a peer's copied in
    // 16-byte vectors: the candidates' scattered stores stay local.
    const int32_t p0 = int32_t(chunk_lo) + warp * kSegment;
    constexpr int kSecond = int(offsetof(Shared, gather_positions) - offsetof(Shared, gather_keys));
    static_assert(kSecond == sizeof(Shared::gather_keys), "positions right after the keys");
    mine.template Write<kSecond>(scan, lowest, reinterpret_cast<int32_t*>(sh.gather_keys), base,
                                 p0);
    if (threadIdx.x == 0) *cluster.map_shared_rank(&sh.region_kept[rank], 0) = count;
    if (rank != 0) {
      __syncthreads();
      const int32_t vecs = (count + 3) / 4, at = rank * room;
      auto* keys = reinterpret_cast<uint4*>(cluster.map_shared_rank(sh.gather_keys, 0) + at);
      auto* positions =
          reinterpret_cast<uint4*>(cluster.map_shared_rank(sh.gather_positions, 0) + at);
      const auto* staged_keys = reinterpret_cast<const uint4*>(sh.gather_keys);
      const auto* staged_positions = reinterpret_cast<const uint4*>(sh.gather_positions);
      for (int32_t v = int32_t(threadIdx.x); v < 2 * vecs; v += kThreads) {
        if (v < vecs) {
          keys[v] = staged_keys[v];
        } else {
          positions[v - vecs] = staged_positions[v - vecs];
        }
      }
    }
  } else if (threadIdx.x == 0) {
    for (int q = 0; q < cl; ++q) *cluster.map_shared_rank(&sh.overflow, q) = 1;
  }
  cluster.sync();  // rank 0 holds the row's candidates; no CTA reads a peer's memory after it
  DSV41_STAMP(4);
  if (sh.overflow != 0) return false;  // uniform: every CTA was told
  if (rank == 0) {
    onchip::SelectFromFirst<kThreads>(
        sh.select, sh.gather_keys, GatheredKeys(kept, room, cl, sh.region_kept), k, first,
        onchip::PositionsOut<GatheredPositions>{GatheredPositions{sh.gather_positions}, out});
  }
  return true;
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    ShortTopkKernel(TopkArgs a, int64_t chunk, ShortOutputs x) {
  extern __shared__ uint32_t dyn[];  // dynamic: the CPU stand-in starts it as garbage
  Shared& sh = *reinterpret_cast<Shared*>(dyn);
  const cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cl;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  DSV41_STAMP(0);

  // ---- the chunk's keys
  constexpr int kVec = 16 / int(sizeof(T)), kTiles = kPer / kVec;
  const int64_t seg = int64_t(warp) * kSegment + lane * kVec;
  float v[kTiles][kVec];
  topk::Row<T> r = topk::RowChunk<T>(a, row, chunk, rank);
  LoadTiles<T>(r, seg, v);
  const int64_t mine = r.hi - r.lo;
  for (int i = threadIdx.x; i < 3 * kBins; i += kThreads) (&sh.hist[0][0])[i] = 0;
  if (cl > 1) {
    for (int i = threadIdx.x; i < 3 * kBins; i += kThreads) (&sh.sum[0][0])[i] = 0;
    if (threadIdx.x == 0) sh.overflow = 0;
    if (rank == 0) {  // GatherSelect's histograms
      for (int i = threadIdx.x; i < 2 * (kBins + onchip::kGroups); i += kThreads)
        (&sh.select.hist[0][0])[i] = 0;
    }
  }
  if (a.members != nullptr) {  // the candidate blocks this chunk overlaps (it synchronises)
    const int64_t b0 = r.lo / a.block_size, b1 = (r.hi + a.block_size - 1) / a.block_size;
    MarkIds<kThreads>(sh.member_bits, b0, b1, a.members + row * a.num_members, a.num_members);
    r.member_bits = sh.member_bits, r.member_base = b0;
  } else if (cl == 1) {
    __syncthreads();
  }
  // Every CTA's sums are zero (and every CTA runs) before a peer adds into them; the loads
  // above are in flight meanwhile.
  if (cl > 1) cluster.sync();
  if constexpr (kVec == 4) {  // past the barrier: the loads were in flight meanwhile
    if (x.block_max != nullptr) {
      WriteBlockMax<kTiles>(a, x.block_max, row, r.len, rank * chunk, chunk, seg, v);
    }
  }
  uint32_t key[kPer];
  TileKeys<T>(a, r, mine, seg, v, key);
  const bool warp_has_keys = int64_t(warp) * kSegment < mine;
  DSV41_STAMP(1);

  // ---- the k-th key: keys above `thresh` are taken, and the first `need` keys equal to it
  int32_t k_rem = a.k, need = 0;
  uint32_t thresh = 0;
  const Digit d0 = DigitPass<21, 11>(sh, key, cluster, cl, 0, k_rem, warp_has_keys);
  const int32_t total = d0.total;  // keys that may be selected
  DSV41_STAMP(2);
  const onchip::First first{total, d0.bin, d0.above, d0.in_bin};
  const int32_t kept = first.Candidates(a.k);  // uniform over the cluster
  if (cl > 1 && kept <= kGather &&
      GatherSelect<kVec>(sh, key, cluster, cl, rank, r.lo, first, kept, a.k,
                         a.out + row * int64_t(a.k)))
    return;
  if (total > a.k) {  // uniform over the cluster: every CTA summed the same histograms
    uint32_t prefix = uint32_t(d0.bin);
    k_rem -= d0.above;
    if (d0.in_bin == k_rem) {
      thresh = topk::Below(prefix << 21);
    } else {
      const Digit d1 = DigitPass<10, 11>(sh, key, cluster, cl, prefix, k_rem, warp_has_keys);
      DSV41_STAMP(3);
      prefix = (prefix << 11) | uint32_t(d1.bin);
      k_rem -= d1.above;
      if (d1.in_bin == k_rem) {
        thresh = topk::Below(prefix << 10);
      } else {
        const Digit d2 = DigitPass<0, 10>(sh, key, cluster, cl, prefix, k_rem, warp_has_keys);
        DSV41_STAMP(4);
        thresh = (prefix << 10) | uint32_t(d2.bin);
        need = k_rem - d2.above;
      }
    }
  }

  // ---- output slots in position order: per tile, the keys above / equal (<= 32 * kVec each,
  //      packed low | high 16 bits) scanned over the warp's lanes, then over warps and CTAs
  uint32_t before[kTiles], tile[kTiles], warp_total = 0;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    uint32_t c = 0;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const uint32_t kk = key[kVec * j + e];
      c += kk > thresh ? 1u : (need > 0 && kk == thresh ? 1u << 16 : 0u);
    }
    uint32_t x = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    before[j] = x - c;
    tile[j] = __shfl_sync(0xffffffffu, x, 31);
    warp_total += tile[j];
  }
  // Only lane 31 contributes: every thread's exclusive scan is the sum over the warps before its
  // own (a CTA's counts stay below 2^15 each, so the packing holds).
  const int32_t warps_before = BlockExclusiveScan<kThreads>(lane == 31 ? int32_t(warp_total) : 0,
                                                            sh.warp_sums, &sh.scan_total);
  int32_t above = warps_before & 0xffff, equal = warps_before >> 16;
  if (cl > 1) {
    if (threadIdx.x == 0) sh.counts = sh.scan_total;
    cluster.sync();
    for (int c = 0; c < rank; ++c) {
      const int32_t x = *cluster.map_shared_rank(&sh.counts, c);
      above += x & 0xffff, equal += x >> 16;
    }
  }
  int32_t* out = a.out + row * int64_t(a.k);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    int32_t g = above + int32_t(before[j] & 0xffff), e = equal + int32_t(before[j] >> 16);
    const int64_t p0 = r.lo + seg + 32 * kVec * j;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const uint32_t kk = key[kVec * j + i];
      if (kk > thresh) {
        out[g + min(e, need)] = int32_t(p0 + i), ++g;
      } else if (need > 0 && kk == thresh) {
        if (e < need) out[g + e] = int32_t(p0 + i);
        ++e;
      }
    }
    above += int32_t(tile[j] & 0xffff), equal += int32_t(tile[j] >> 16);
  }
  if (rank == 0) {
    for (int32_t i = min(total, a.k) + int32_t(threadIdx.x); i < a.k; i += kThreads) out[i] = -1;
  }
  DSV41_STAMP(5);
  if (cl > 1) cluster.sync();  // the peers have read this CTA's counts: it may exit
}

// The one-CTA kernel of a row of `chunk` scores: the fewest tiles a lane that hold the chunk
// (every warp keeps keys); bf16's full count is two tiles, so its two-tile kernel is the
// full-width one.
template <class T, bool kTable = false>
auto CtaKernelFor(int64_t chunk) {
  auto kernel = ShortTopkCtaKernel<T, kFullTiles<T>, kTable>;
  if (chunk <= 2 * kTileRow<T>) kernel = ShortTopkCtaKernel<T, 2, kTable>;
  if (chunk <= kTileRow<T>) kernel = ShortTopkCtaKernel<T, 1, kTable>;
  return kernel;
}

template <class T>
cudaError_t Launch(const TopkArgs& args, const ShortOutputs& x, cudaStream_t stream) {
  // Fewest CTAs that hold the row, equal chunks of whole warp segments (16-byte aligned).
  const int64_t cl = max((args.n + kShortChunk - 1) / kShortChunk, int64_t(1));
  const int64_t chunk = ((args.n + cl - 1) / cl + kSegment - 1) / kSegment * kSegment;
  if (x.table.blocks != nullptr) {  // a top-C of float rows of one CTA (LaunchShortTopk checked)
    const size_t smem = sizeof(CtaShared) + size_t(x.table.max_pages) * sizeof(int32_t);
    return LaunchKernel(CtaKernelFor<float, true>(chunk), dim3(unsigned(args.rows)), dim3(kThreads),
                        smem, stream, 1u, args, chunk, x);
  }
  if (cl == 1) {
    return LaunchKernel(CtaKernelFor<T>(chunk), dim3(unsigned(args.rows)), dim3(kThreads),
                        sizeof(CtaShared), stream, 1u, args, chunk, x);
  }
  return LaunchKernel(ShortTopkKernel<T>, dim3(unsigned(args.rows * cl)), dim3(kThreads),
                      sizeof(Shared), stream, unsigned(cl), args, chunk, x);
}

}  // namespace

cudaError_t PrepareShortTopk() {
  const cudaError_t err =
      SetMaxDynamicSmem(sizeof(Shared), ShortTopkKernel<float>, ShortTopkKernel<topk::Bf16>);
  if (err != cudaSuccess) return err;
  const cudaError_t e = SetMaxDynamicSmem(
      sizeof(CtaShared), ShortTopkCtaKernel<float, 1>, ShortTopkCtaKernel<float, 2>,
      ShortTopkCtaKernel<float, kFullTiles<float>>, ShortTopkCtaKernel<topk::Bf16, 1>,
      ShortTopkCtaKernel<topk::Bf16, kFullTiles<topk::Bf16>>);
  if (e != cudaSuccess) return e;
  return SetMaxDynamicSmem(sizeof(CtaShared) + kMaxTablePages * sizeof(int32_t),
                           ShortTopkCtaKernel<float, 1, true>, ShortTopkCtaKernel<float, 2, true>,
                           ShortTopkCtaKernel<float, kFullTiles<float>, true>);
}

int32_t ShortTopkMaxActiveClusters(int32_t cluster) {
  if (cluster < 1 || cluster > kShortMaxCluster) return 0;
  if (cluster == 1)
    return MaxActiveClusters(ShortTopkCtaKernel<float, kFullTiles<float>>, 1, kThreads,
                             sizeof(CtaShared));
  return MaxActiveClusters(ShortTopkKernel<float>, cluster, kThreads, sizeof(Shared));
}

bool ShortTopkWritesBlockMax(int64_t n, int32_t block_size) {
  return block_size == 8 && n >= 1 && n <= kShortMaxCluster * kShortChunk;
}

bool ShortTopkWritesEveryBlock(int64_t n, int64_t c, int32_t block_size, int64_t max_pages,
                               int32_t page_size) {
  return n >= 1 && n <= kShortChunk && c >= 1 && c <= kMaxSortCandidates && block_size >= 1 &&
         page_size >= 1 && page_size % block_size == 0 && max_pages >= 1 &&
         max_pages <= INT32_MAX / page_size;
}

bool ShortTopkWritesTable(int64_t n, int32_t block_size, int64_t max_pages, int32_t page_size) {
  return n >= 1 && n <= kShortChunk && block_size >= 1 && page_size % block_size == 0 &&
         max_pages >= 1 && max_pages <= kMaxTablePages && max_pages * page_size == n * block_size;
}

cudaError_t LaunchShortTopk(const TopkArgs& args, cudaStream_t stream, const ShortOutputs& x) {
  if (args.rows == 0) return cudaSuccess;
  if (args.k <= 0 || args.n > kShortMaxCluster * kShortChunk) return cudaErrorInvalidValue;
  if (args.members != nullptr && args.mode != TopkMode::kPositions) return cudaErrorInvalidValue;
  if (x.block_max != nullptr &&
      (args.mode != TopkMode::kPositions || args.bf16 || args.starts != nullptr ||
       args.members != nullptr || !ShortTopkWritesBlockMax(args.n, args.block_size))) {
    return cudaErrorInvalidValue;
  }
  if (x.table.blocks != nullptr &&
      (args.mode != TopkMode::kCandidateBlocks || args.bf16 || args.starts != nullptr ||
       !ShortTopkWritesTable(args.n, args.block_size, x.table.max_pages, x.table.page_size) ||
       x.table.c != args.k)) {
    return cudaErrorInvalidValue;
  }
  const TableOut& e = x.every_block;
  if (e.blocks != nullptr &&
      (args.mode != TopkMode::kPositions || args.starts != nullptr || args.members != nullptr ||
       !ShortTopkWritesEveryBlock(args.n, e.c, args.block_size, e.max_pages, e.page_size))) {
    return cudaErrorInvalidValue;
  }
  return args.bf16 ? Launch<topk::Bf16>(args, x, stream) : Launch<float>(args, x, stream);
}

}  // namespace dsv41
