// Exact top-k, filter first. A row is split over a cluster of 1-8 CTAs (one per SM). Each CTA
// streams its chunk once and appends, in position order, the keys at or above an entry bar to a
// shared-memory buffer of (key, position) pairs:
//   - the bar starts at an estimate of the chunk's k-th key from a strided sample of 1024 keys
//     (two 8-bit radix steps on the sample), set so that about twice k keys pass;
//   - when a round would overflow the buffer, the buffer is cut to its own exact top k and the
//     bar rises above the k-th key (a later position that only ties it can never get in);
//   - if fewer than k keys passed a sampled bar, the chunk is streamed again with no bar (exact
//     whatever the sample said).
// The buffer then holds a superset of the chunk's exact top k, in position order; it is cut to
// that top k unless the launch expects every chunk's buffer to fit the first CTA's uncut and
// they do. The union over the chunks holds the row's top k. The peers store their buffers into
// the cluster's first CTA's through distributed shared memory, all at once, each at its offset
// in chunk order (so still in position order); the first CTA cuts to the top k and writes the
// positions, ascending.
// Every cut is a radix select of up to four passes over shared memory with ties taken in buffer
// (= position) order, so the result is the contract's (score desc, position asc) set,
// deterministic.
// The global scores are read once (twice in the sample-fallback case), with the next round's
// loads in flight while a round is appended: the dependent phases of the cluster radix select
// (four cluster-wide histogram passes) become block-local ones over a few thousand keys. A score
// meets the bar by one float compare (topk::LeastScoreOf) and gets its key only when it enters
// (candidate blocks compare keys). With a candidate mask, the streamed elements are the member
// blocks' positions only (MaskedSource).
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "smxx_bitmap.cuh"
#include "smxx_block_scan.cuh"
#include "smxx_filter_topk.cuh"
#include "smxx_launch.cuh"
#include "smxx_pdl.cuh"
#include "smxx_phase_stamps.cuh"
#include "smxx_radix_digit.cuh"
#include "smxx_topk_keys.cuh"

namespace cg = cooperative_groups;

namespace dsv41 {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 8;                  // consecutive elements per thread per round
constexpr int kRound = kThreads * kPer;  // 8192 elements per round
constexpr int kHists = 8;                // histogram copies (warp w adds to copy w % 8)
constexpr int kSample = kThreads;        // one sampled key per thread
constexpr int kMaxCluster = 8;           // portable cluster size: one CTA per SM fits a GPC
constexpr int kSplitMaxParts = 16;       // split rows: CTAs a row at most
constexpr int kRowSamplePer = 4;         // split rows: the row bar's sample, keys a thread
constexpr int64_t kCap = kFilterCapacity;
static_assert(kFilterMaxK + kRound <= kCap, "a cut buffer plus one round must fit");
using topk::kExcluded;

struct Shared {
  uint32_t hist[kHists][kRadixBins];
  int32_t warp_sums[kWarps];
  int32_t scan_total;
  RadixState radix;                     // RadixSelect's result
  int32_t count;                        // pairs in the buffer (read by the cluster's CTAs)
  int32_t offset;                       // where this chunk's pairs go in the first CTA's buffer
  int32_t total;                        // the pairs the first CTA gathers
  int32_t cut;                          // whether each chunk is cut to its top k before the gather
  int32_t slot_at[kSplitMaxParts + 1];  // split rows: where each chunk's pairs go when gathered
  int32_t last;                         // split rows: this CTA arrived last at the merge
  uint32_t key_and, key_or;             // CommonTopBytes: every key's bits ANDed, ORed
};

// The rank in a strided sample of `samples` keys of the entry bar for `mine` keys (about 2k keys
// pass it), or 0 where they are streamed with no bar: keys that fit the buffer, or a bar that
// would pass more than half of them.
__device__ __forceinline__ int64_t SampleRank(int64_t mine, int32_t k, int samples = kSample) {
  if (mine <= kCap) return 0;
  const int64_t rank = (2 * int64_t(k) * samples + mine - 1) / mine + 8;
  return rank <= samples / 2 ? rank : 0;
}

// Whether a cluster's chunks of `chunk` keys are gathered uncut when they fit: where each is
// sampled, the pairs expected past the bars fit the first CTA's buffer, and one cut of them
// costs no more than a cut a chunk plus the row's cut (a cut is about 2048 pairs' worth of
// fixed latency plus its pairs). Uniform over the cluster.
__device__ __forceinline__ bool TryUncut(int64_t chunk, int32_t k, int cl) {
  const int64_t rank = SampleRank(chunk, k);
  if (cl < 2 || rank == 0) return false;
  const int64_t kept = rank * chunk / kSample;
  return cl * kept <= kCap && cl * kept <= kept + cl * int64_t(k) + 2048;
}

// The k-th largest of the keys that `for_keys` hands each thread (kExcluded skipped), to its top
// 8 * `passes` bits: sh.radix (RadixState). With `whole_bin`, it stops after a step whose bin
// holds exactly the keys still needed (every key of it is taken). From step `first` on, where
// every key's top `first` bytes are `prefix`'s (a step over them decides nothing); `first` > 0
// needs more than k keys (no step sets `all` then). All threads call it.
template <class ForKeys>
__device__ void RadixSelect(Shared& sh, int32_t k, int passes, ForKeys for_keys,
                            bool whole_bin = false, int first = 0, uint32_t prefix = 0) {
  __syncthreads();  // every thread has read the previous selection's results
  if (threadIdx.x == 0) {
    const uint32_t mask = first == 0 ? 0u : ~0u << (32 - 8 * first);
    sh.radix = {prefix & mask, mask, k, 0, 0};
  }
  if (first >= passes) __syncthreads();  // no step (whose barriers publish sh.radix) runs
  auto block_sum = [](int, int32_t sum) { return sum; };  // one CTA: its copies' sum
  for (int pass = first; pass < passes; ++pass) {
    if (RadixDigitStep<kThreads>(sh.radix, sh.hist, pass, for_keys, block_sum, sh.warp_sums,
                                 &sh.scan_total)) {
      break;  // at most k keys
    }
    if (whole_bin && sh.radix.in_bin == sh.radix.k_rem) break;  // uniform
  }
}

// How many leading bytes (0-4) all `n` keys of the buffer share (their bits: `common`). All
// threads call it.
__device__ int CommonTopBytes(Shared& sh, const uint32_t* keys, int32_t n, uint32_t& common) {
  if (threadIdx.x == 0) sh.key_and = ~0u, sh.key_or = 0;
  __syncthreads();
  uint32_t all = ~0u, any = 0;
  for (int32_t i = threadIdx.x; i < n; i += kThreads) all &= keys[i], any |= keys[i];
  all = __reduce_and_sync(0xffffffffu, all);
  any = __reduce_or_sync(0xffffffffu, any);
  if (threadIdx.x % 32 == 0) atomicAnd(&sh.key_and, all), atomicOr(&sh.key_or, any);
  __syncthreads();
  common = sh.key_and;
  return __clz(int(sh.key_and ^ sh.key_or)) / 8;  // __clz(0) = 32: all equal
}

// Cuts the buffer's n > k pairs, in place and in order, to its top k by (key desc, buffer index
// asc). Returns the least key a later pair needs to get in: one above the k-th key, or the lowest
// key of its bin where the bin was taken whole (the later pairs it lets in are cut later).
// `one_bar`: the pairs all passed one entry bar near the k-th key (a split row's slots), so
// they likely share their top bytes and the radix steps start below them (CommonTopBytes); where
// the keys span more (a chunk's buffer) that pass measured slower than the steps it saves.
__device__ uint64_t CutToTopK(Shared& sh, uint32_t* keys, int32_t* pos, int32_t n, int32_t k,
                              bool one_bar = false) {
  uint32_t common = 0;
  const int first = one_bar ? CommonTopBytes(sh, keys, n, common) : 0;
  RadixSelect(
      sh, k, 4,
      [&](auto add) {
        for (int32_t i = threadIdx.x; i < n; i += kThreads) add(keys[i]);
      },
      true, first, common);
  // n > k valid keys (>= 1). Where the k-th key's bin is taken whole, every key from the bin's
  // lowest (the prefix, low bits 0) up is kept (`kth` the key below it); otherwise `kth` is the
  // k-th key and its first `need_eq` ties in buffer order are kept (all n keys equal: no step
  // ran, in_bin stayed 0 < k, and `kth` is that key).
  const bool whole = sh.radix.in_bin == sh.radix.k_rem;
  const uint32_t kth = whole ? topk::Below(sh.radix.prefix) : sh.radix.prefix;
  const int32_t need_eq = whole ? 0 : sh.radix.k_rem;
  EmitState st = {0, 0};
  for (int32_t base = 0; base < n; base += kRound) {
    const int32_t i0 = base + int32_t(threadIdx.x) * kPer;
    uint32_t kk[kPer];
    int32_t pp[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      kk[j] = i0 + j < n ? keys[i0 + j] : kExcluded;
      pp[j] = i0 + j < n ? pos[i0 + j] : 0;
    }
    // In place: a round's slots land below its end, and its reads precede the scan's barriers.
    EmitRoundInOrder<kThreads>(
        st, kk, need_eq, [&](uint32_t key) { return key > kth; },
        [&](uint32_t key) { return key == kth; },
        [&](int j, int32_t slot) { keys[slot] = kk[j], pos[slot] = pp[j]; }, sh.warp_sums,
        &sh.scan_total);
  }
  __syncthreads();
  return uint64_t(kth) + 1;
}

// Shared memory of the masked mode beyond the buffer: the candidate bitmap over the row's
// blocks, then the ordered candidate block list (at most one entry per member).
__device__ __host__ __forceinline__ int64_t MaskWords(const TopkArgs& a) {
  return ((a.n + a.block_size - 1) / a.block_size + 31) / 32;
}

// The entry bar: an element enters the buffer iff its key is at least `key`. Where the keys are
// KeyOf's of kPositions (NaN and -inf never enter), that is one float compare of its score:
// score >= `score` (NaN, and so every load past the elements, fails it).
struct EntryBar {
  uint64_t key;
  float score;
};

__device__ __forceinline__ EntryBar MakeBar(uint64_t key) { return {key, topk::LeastScoreOf(key)}; }

// How many of a thread's kPer scores enter past a bar of kPositions keys.
__device__ __forceinline__ int32_t ScoresEntering(const EntryBar& bar, const float (&s)[kPer]) {
  int32_t n = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) n += s[j] >= bar.score;
  return n;
}

// Appends those pairs (key, position_of(j)) in order at `slot`.
template <class PositionOf>
__device__ __forceinline__ void AppendScores(const EntryBar& bar, const float (&s)[kPer],
                                             uint32_t* keys, int32_t* pos, int32_t slot,
                                             PositionOf position_of) {
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (s[j] >= bar.score) {
      keys[slot] = topk::OrderedKey(s[j]), pos[slot] = int32_t(position_of(j)), ++slot;
    }
  }
}

// The entry bar for `mine` keys from a strided sample of kPerThread * kThreads of them
// (`key_at(i)`, i < mine): a key about 2k of them reach (kExcluded = 0 never does), or 1 (no
// bar) where SampleRank takes none. All threads call it.
template <int kPerThread, class KeyAt>
__device__ __forceinline__ uint64_t SampledBar(Shared& sh, int64_t mine, int32_t k, KeyAt key_at) {
  constexpr int kSamples = kPerThread * kThreads;
  const int64_t rank = SampleRank(mine, k, kSamples);
  if (rank == 0) return 1;
  uint32_t key[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    key[j] = key_at((int64_t(threadIdx.x) + j * kThreads) * mine / kSamples);
  }
  RadixSelect(sh, int32_t(rank), 2, [&](auto add) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) add(key[j]);
  });
  return sh.radix.all ? 1 : max(uint64_t(sh.radix.prefix), uint64_t(1));
}

// The thread's scores of the source's first round.
template <class Source>
__device__ __forceinline__ void LoadFirstRound(const Source& src, float (&first)[kPer]) {
  src.Load(int64_t(threadIdx.x) * kPer, first);
}

// Streams the source's elements once, appending the keys at or above `first_bar` to the buffer
// in position order (cut to its top k, with the bar raised, where a round would overflow it).
// With `restream`, streams again with no bar where fewer than k entered past a sampled bar.
// `first`: the thread's scores of the first round, loaded by the caller (LoadFirstRound) before
// it sampled its bar, so that their latency overlapped the sample's select.
// Returns the buffer's pairs: a superset of the streamed keys' exact top k, or (no restream,
// fewer than k entered) every key at or above the bar.
template <class Source>
__device__ __forceinline__ int32_t StreamPastBar(Shared& sh, const TopkArgs& a, const Source& src,
                                                 uint32_t* keys, int32_t* pos, uint64_t first_bar,
                                                 bool restream, float (&first)[kPer]) {
  const int64_t mine = src.mine;
  const int32_t k = a.k;
  int32_t count = 0;
  for (EntryBar bar = MakeBar(first_bar);; bar = MakeBar(1)) {
    count = 0;
    float v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = first[j];
    for (int64_t base = 0; base < mine; base += kRound) {
      const int64_t i0 = base + int64_t(threadIdx.x) * kPer;
      float s[kPer];  // this round's scores; v takes the next round's loads meanwhile
#pragma unroll
      for (int j = 0; j < kPer; ++j) s[j] = v[j];
      if (base + kRound < mine) src.Load(i0 + kRound, v);
      int32_t n = src.Entering(a, bar, i0, s);
      int32_t slot = BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
      int32_t round = sh.scan_total;
      if (count + round > kCap) {  // uniform; count > kCap - kRound >= k
        bar = MakeBar(CutToTopK(sh, keys, pos, count, k));
        count = k;
        n = src.Entering(a, bar, i0, s);
        slot = BlockExclusiveScan<kThreads>(n, sh.warp_sums, &sh.scan_total);
        round = sh.scan_total;
      }
      if (n > 0) src.Append(a, bar, i0, s, keys, pos, count + slot);
      count += round;
    }
    __syncthreads();
    if (!restream || count >= k || bar.key <= 1) break;  // uniform
    LoadFirstRound(src, first);                          // streamed again from its start
  }
  return count;
}

// Every CTA's part: its source's exact top k into the buffer, then (first CTA) the row's.
template <class Source>
__device__ __forceinline__ void SelectRowChunk(Shared& sh, const TopkArgs& a, const Source& src,
                                               uint32_t* keys, int32_t* pos,
                                               const cg::cluster_group& cluster, int cl, int rank,
                                               int64_t row, bool try_uncut) {
  const int64_t mine = src.mine;
  const int32_t k = a.k;

  // ---- the entry bar (keys >= bar enter the buffer), then the chunk streamed once (again
  // without a bar if the sampled one kept fewer than k)
  float first[kPer];
  LoadFirstRound(src, first);
  const uint64_t sampled_bar =
      SampledBar<1>(sh, mine, k, [&](int64_t i) { return src.KeyAt(a, i); });
  DSV41_STAMP(1);
  int32_t count = StreamPastBar(sh, a, src, keys, pos, sampled_bar, true, first);
  DSV41_STAMP(2);

  // ---- this chunk's top k, then the row's: the first CTA gathers the chunks' (chunk order).
  // Where the chunks are expected to fit the first CTA's buffer uncut (`try_uncut`), each is
  // cut only if their total does not fit: one cut of the gathered pairs then replaces a cut a
  // chunk plus the row's cut.
  if (count > k && !try_uncut) {
    CutToTopK(sh, keys, pos, count, k);
    count = k;
  }
  DSV41_STAMP(3);
  if (cl > 1) {
    if (threadIdx.x == 0) sh.count = count;
    cluster.sync();  // every chunk's buffer is final, or (try_uncut) its count is
    // Lane c reads chunk c's count (cl <= 32): the pairs it hands the first CTA (its top k where
    // the chunks are cut), their total, and this chunk's offset in the first CTA's buffer.
    if (threadIdx.x < 32) {
      const int c = int(threadIdx.x);
      const int32_t n = c < cl ? *cluster.map_shared_rank(&sh.count, c) : 0;
      const bool fit = try_uncut && __reduce_add_sync(0xffffffffu, uint32_t(n)) <= kCap;
      const int32_t sent = fit ? n : min(n, k);  // cut: at most cl * k <= kCap (launcher)
      const int32_t before = WarpInclusiveScan(sent) - sent;
      if (c == rank) sh.offset = before;
      if (c == 0) sh.cut = !fit;
      if (c == cl - 1) sh.total = before + sent;
    }
    __syncthreads();
    if (sh.cut && count > k) {  // sh.cut is uniform over the cluster
      CutToTopK(sh, keys, pos, count, k);
      count = k;
    }
    // The first CTA's own pairs stay where they are; a peer's may go only once the first CTA's
    // buffer is final (cut in place or not: try_uncut cuts after the counts are read).
    if (sh.cut && try_uncut) cluster.sync();
    if (rank != 0) {  // each peer stores its pairs into the first CTA's buffer at its offset
      uint32_t* first_keys = cluster.map_shared_rank(keys, 0) + sh.offset;
      int32_t* first_pos = cluster.map_shared_rank(pos, 0) + sh.offset;
      for (int32_t i = threadIdx.x; i < count; i += kThreads) {
        first_keys[i] = keys[i], first_pos[i] = pos[i];
      }
    }
    count = sh.total;
    cluster.sync();  // every peer's pairs are in the first CTA's buffer: they may exit
    DSV41_STAMP(4);
    if (rank != 0) return;
    if (count > k) {
      CutToTopK(sh, keys, pos, count, k);
      count = k;
    }
  }
  DSV41_STAMP(5);
  int32_t* out = a.out + row * int64_t(k);
  for (int32_t i = threadIdx.x; i < k; i += kThreads) out[i] = i < count ? pos[i] : -1;
  DSV41_STAMP(6);
}

// The elements a CTA streams: its chunk of the row, element i at position lo + i. kBlocks: the
// elements are candidate blocks, whose keys (the pinned newest block; kLowest for NaN and -inf)
// are compared as keys; otherwise a score enters by the bar's float compare (NaN past the
// chunk: LoadScores).
template <class T, bool kBlocks>
struct RowChunkSource {
  topk::Row<T> r;
  int64_t mine;
  bool aligned;

  __device__ __forceinline__ int32_t Entering(const TopkArgs& a, const EntryBar& bar, int64_t i0,
                                              const float (&s)[kPer]) const {
    if constexpr (kBlocks) {
      uint32_t kk[kPer];
      topk::ScoresToKeys<kPer>(a, r, mine, i0, s, kk);
      int32_t n = 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j) n += kk[j] >= bar.key;
      return n;
    } else {
      return ScoresEntering(bar, s);
    }
  }
  __device__ __forceinline__ void Append(const TopkArgs& a, const EntryBar& bar, int64_t i0,
                                         const float (&s)[kPer], uint32_t* keys, int32_t* pos,
                                         int32_t slot) const {
    const int64_t p0 = r.lo + i0;
    if constexpr (kBlocks) {
      uint32_t kk[kPer];
      topk::ScoresToKeys<kPer>(a, r, mine, i0, s, kk);
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (kk[j] >= bar.key) keys[slot] = kk[j], pos[slot] = int32_t(p0 + j), ++slot;
      }
    } else {
      AppendScores(bar, s, keys, pos, slot, [&](int j) { return p0 + j; });
    }
  }
  __device__ __forceinline__ void Load(int64_t i0, float (&v)[kPer]) const {
    topk::LoadScores<kPer>(r, mine, i0, aligned, v);
  }
  __device__ __forceinline__ int64_t Position(int64_t i) const { return r.lo + i; }
  __device__ __forceinline__ uint32_t KeyAt(const TopkArgs& a, int64_t i) const {
    return RowKey(a, r.lo + i);
  }
  __device__ __forceinline__ uint32_t RowKey(const TopkArgs& a, int64_t p) const {  // p < r.len
    return topk::KeyOf(a, r, p, topk::ToFloat(r.scores[p]));
  }
};

// f(std::bool_constant<kBlocks>) for the call's mode (kBlocks: candidate blocks, compared as
// keys), so that each mode's source is its own instantiation.
template <class F>
__device__ __forceinline__ auto ByMode(const TopkArgs& a, F f) {
  return a.mode == TopkMode::kCandidateBlocks ? f(std::true_type{}) : f(std::false_type{});
}

// Chunk `part` of `row` (chunks of `chunk` elements) as a RowChunkSource.
template <class T, bool kBlocks>
__device__ __forceinline__ RowChunkSource<T, kBlocks> ChunkOf(const TopkArgs& a, int64_t row,
                                                              int64_t chunk, int part) {
  RowChunkSource<T, kBlocks> src;
  src.r = topk::RowChunk<T>(a, row, chunk, part);
  src.mine = src.r.hi - src.r.lo;
  src.aligned = topk::Aligned(src.r);
  return src;
}

// The elements a CTA streams under a candidate mask: the positions of the row's candidate
// blocks, ascending (`blocks`, built in shared memory), element e of the CTA's chunk at
// position blocks[(lo + e) / B] * B + (lo + e) % B. Only these scores are read.
template <class T>
struct MaskedSource {
  const T* scores;  // the row's position 0
  int64_t len;      // visible positions
  const int32_t* blocks;
  int64_t lo, mine;
  int32_t block_size;
  bool vector;  // B % 8 == 0, lo % 8 == 0 and 16-byte aligned rows: a thread's 8 elements are
                // 8 consecutive positions of one block, read as whole vectors

  __device__ __forceinline__ int64_t Position(int64_t i) const {
    const int64_t e = lo + i;
    return int64_t(blocks[e / block_size]) * block_size + e % block_size;
  }
  __device__ __forceinline__ void Load(int64_t i0, float (&v)[kPer]) const {
    if (vector && i0 + kPer <= mine) {
      const int64_t p0 = Position(i0);
      if (p0 + kPer <= len) {
        topk::Row<T> at{scores, len, p0, p0 + kPer, 0, nullptr, 0};
        topk::LoadScores<kPer>(at, kPer, 0, true, v);
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t p = i0 + j < mine ? Position(i0 + j) : len;
      v[j] = p < len ? topk::ToFloat(scores[p]) : topk::NoScore();
    }
  }
  __device__ __forceinline__ int32_t Entering(const TopkArgs&, const EntryBar& bar, int64_t,
                                              const float (&s)[kPer]) const {
    return ScoresEntering(bar, s);  // NaN where no element (Load)
  }
  __device__ __forceinline__ void Append(const TopkArgs&, const EntryBar& bar, int64_t i0,
                                         const float (&s)[kPer], uint32_t* keys, int32_t* pos,
                                         int32_t slot) const {
    AppendScores(bar, s, keys, pos, slot, [&](int j) { return Position(i0 + j); });
  }
  __device__ __forceinline__ uint32_t KeyAt(const TopkArgs&, int64_t i) const {
    const int64_t p = Position(i);
    if (p >= len) return kExcluded;
    const float v = topk::ToFloat(scores[p]);
    return v == v && v != -INFINITY ? topk::OrderedKey(v) : kExcluded;
  }
};

// The row's candidate blocks below ceil(len / B), ascending and once each, from `members` (any
// order, repeats and out-of-range ids allowed): a bitmap, then an ordered compaction of its set
// bits. Returns how many.
__device__ int64_t MaskBlocks(Shared& sh, const TopkArgs& a, int64_t row, int64_t len,
                              uint32_t* bits, int32_t* blocks) {
  const int64_t nblocks = (len + a.block_size - 1) / a.block_size;
  const int64_t words = (nblocks + 31) / 32;
  MarkIds<kThreads>(bits, 0, nblocks, a.members + row * a.num_members, a.num_members);
  const int32_t total =
      ForEachSetBitInOrder<kThreads>(bits, words, sh.warp_sums, &sh.scan_total,
                                     [&](int32_t b, int32_t i, int32_t) { blocks[i] = b; });
  __syncthreads();
  return total;
}

// One row chunk's (or, masked, one chunk of the candidate positions') exact select.
template <class T, bool kMasked>
__global__ void __launch_bounds__(kThreads, 1) FilterTopkKernel(TopkArgs a, int64_t chunk) {
  // keys [kCap] | positions [kCap] | masked: candidate bitmap | candidate blocks
  extern __shared__ uint32_t dyn[];
  __shared__ Shared sh;
  uint32_t* keys = dyn;
  int32_t* pos = reinterpret_cast<int32_t*>(dyn + kCap);
  cg::cluster_group cluster = cg::this_cluster();
  const int cl = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cl;
  DSV41_STAMP(0);
  if constexpr (kMasked) {
    const topk::Row<T> whole = topk::RowChunk<T>(a, row, a.n, 0);
    uint32_t* bits = dyn + 2 * kCap;
    int32_t* blocks = reinterpret_cast<int32_t*>(bits + MaskWords(a));
    const int64_t elems = MaskBlocks(sh, a, row, whole.len, bits, blocks) * a.block_size;
    MaskedSource<T> src;
    src.scores = whole.scores;
    src.len = whole.len;
    src.blocks = blocks;
    src.lo = min(int64_t(rank) * chunk, elems);
    src.mine = min(src.lo + chunk, elems) - src.lo;
    src.block_size = a.block_size;
    src.vector = a.block_size % kPer == 0 && src.lo % kPer == 0 &&
                 (reinterpret_cast<uintptr_t>(whole.scores) & 15) == 0;
    // Masked chunks' sizes are known only here (the row's candidates): always cut.
    SelectRowChunk(sh, a, src, keys, pos, cluster, cl, rank, row, false);
  } else {
    const bool try_uncut = TryUncut(chunk, a.k, cl);
    ByMode(a, [&](auto blocks) {
      SelectRowChunk(sh, a, ChunkOf<T, blocks.value>(a, row, chunk, rank), keys, pos, cluster, cl,
                     rank, row, try_uncut);
    });
  }
}

// ---- Split rows: a row over `parts` CTAs without a cluster, merged through global memory.
// A cluster lives in one GPC, so few rows in clusters leave SMs idle (the H200 runs 15 clusters
// of 8 CTAs at once: 8 rows stream on 64 of its 132 SMs). Split, every CTA of a row takes the
// same row bar from the same strided sample of the whole row (about 2k of the row's keys reach
// it), streams its chunk past it once and stores its pairs, in order, in its slot of the row's
// workspace (cut to its top k where they overflow the slot). The merge kernel's first CTA of the
// row gathers the slots in chunk order (so in position order) and cuts once: the union holds
// every key at or above the bar, or a chunk's top k, a superset of the row's top k wherever at
// least k keys reached the bar. Where fewer did, every CTA of the row streams its chunk again
// with no bar to its exact top k, and the last to arrive gathers those.

// A split row's workspace (kFilterSplitRowWords 32-bit words): the chunks' pair counts, their
// counts after the restream, the row bar, the merge's arrival count, then the slots' keys and
// positions (`slot` pairs a chunk).
struct SplitRow {
  static constexpr int kCounts = 0, kRestreamCounts = 16, kBar = 32, kArrived = 33, kSlots = 64;
  static_assert(kSlots + 2 * kCap == kFilterSplitRowWords, "the workspace a row");
  static_assert(kSplitMaxParts <= 16, "one count word a chunk");
  uint32_t* words;
  int64_t slot;
  __device__ __forceinline__ uint32_t* Keys(int c) const { return words + kSlots + c * slot; }
  __device__ __forceinline__ int32_t* Positions(int c) const {
    return reinterpret_cast<int32_t*>(words + kSlots + kCap + c * slot);
  }
};

__device__ __forceinline__ SplitRow SplitRowOf(const TopkArgs& a, int64_t row, int parts) {
  return {a.workspace + row * kFilterSplitRowWords, kCap / parts};
}

// Stores the buffer's `count` pairs in chunk `part`'s slot, and their count at word
// `counts + part`; first cut to the top k where they exceed `limit` (<= the slot, >= k). All
// threads call it.
__device__ __forceinline__ void StoreSlot(Shared& sh, const TopkArgs& a, uint32_t* keys,
                                          int32_t* pos, int32_t count, int64_t limit,
                                          const SplitRow& w, int part, int counts) {
  if (count > limit) {  // uniform
    CutToTopK(sh, keys, pos, count, a.k);
    count = a.k;
  }
  uint32_t* slot_keys = w.Keys(part);
  int32_t* slot_pos = w.Positions(part);
  for (int32_t i = threadIdx.x; i < count; i += kThreads) {
    slot_keys[i] = keys[i], slot_pos[i] = pos[i];
  }
  if (threadIdx.x == 0) w.words[counts + part] = uint32_t(count);
}

// The row's `parts` slots' offsets in chunk order (sh.slot_at; counts at word `counts`, read
// through L2: other CTAs wrote them). Returns their total. All threads call it.
__device__ int32_t SlotOffsets(Shared& sh, const SplitRow& w, int parts, int counts) {
  if (threadIdx.x < 32) {
    const int c = int(threadIdx.x);
    const int32_t n = c < parts ? int32_t(__ldcg(w.words + counts + c)) : 0;
    const int32_t at = WarpInclusiveScan(n);
    if (c < parts) sh.slot_at[c + 1] = at;
    if (c == 0) sh.slot_at[0] = 0;
  }
  __syncthreads();
  return sh.slot_at[parts];  // <= parts * slot <= kCap
}

// Gathers the `total` pairs of the slots at sh.slot_at (SlotOffsets) into the buffer in chunk
// order, through L2. All threads call it.
__device__ void GatherSlots(const Shared& sh, uint32_t* keys, int32_t* pos, const SplitRow& w,
                            int32_t total) {
  for (int32_t i = threadIdx.x; i < total; i += kThreads) {
    int c = 0;
    while (sh.slot_at[c + 1] <= i) ++c;
    const int64_t j = i - sh.slot_at[c];
    keys[i] = __ldcg(w.Keys(c) + j), pos[i] = __ldcg(w.Positions(c) + j);
  }
  __syncthreads();
}

// A split launch's CTA: its buffer (keys | positions, kCap each) and its chunk `part` of `row`.
struct SplitCta {
  uint32_t* keys;
  int32_t* pos;
  int64_t row;
  int part;
};

__device__ __forceinline__ SplitCta SplitCtaOf(uint32_t* dyn, int parts) {
  return {dyn, reinterpret_cast<int32_t*>(dyn + kCap), int64_t(blockIdx.x / parts),
          int(blockIdx.x % parts)};
}

// Split rows, kernel 1: CTA `part` of the row streams its chunk past the row bar into its slot.
template <class T, bool kBlocks>
__device__ __forceinline__ void SplitChunk(Shared& sh, const TopkArgs& a, int64_t row,
                                           int64_t chunk, int parts, int part, uint32_t* keys,
                                           int32_t* pos) {
  const RowChunkSource<T, kBlocks> src = ChunkOf<T, kBlocks>(a, row, chunk, part);
  float first[kPer];
  LoadFirstRound(src, first);
  const uint64_t bar =
      SampledBar<kRowSamplePer>(sh, src.r.len, a.k, [&](int64_t p) { return src.RowKey(a, p); });
  DSV41_STAMP(1);
  const int32_t count = StreamPastBar(sh, a, src, keys, pos, bar, false, first);
  DSV41_STAMP(2);
  const SplitRow w = SplitRowOf(a, row, parts);
  StoreSlot(sh, a, keys, pos, count, w.slot, w, part, SplitRow::kCounts);
  if (part == 0 && threadIdx.x == 0) {
    w.words[SplitRow::kBar] = uint32_t(bar);  // a 32-bit key, or 1: no bar
    w.words[SplitRow::kArrived] = 0;
  }
  DSV41_STAMP(3);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    FilterSplitKernel(TopkArgs a, int64_t chunk, int parts) {
  extern __shared__ uint32_t dyn[];
  __shared__ Shared sh;
  const auto [keys, pos, row, part] = SplitCtaOf(dyn, parts);
  DSV41_STAMP(0);
  ByMode(a, [&](auto blocks) {
    SplitChunk<T, blocks.value>(sh, a, row, chunk, parts, part, keys, pos);
  });
  // Only now: a merge CTA launched earlier would wait on an SM, and its CUPTI duration (the
  // benchmark's kernel time) would count the wait.
  LaunchDependentGrid();
}

// Split rows, the shortfall: CTA `part` streams its chunk again with no bar to its exact top k
// into its slot; returns whether it arrived last (then every chunk's restream is in L2).
template <class T, bool kBlocks>
__device__ __noinline__ bool RestreamChunk(Shared& sh, const TopkArgs& a, int64_t row,
                                           int64_t chunk, int part, uint32_t* keys, int32_t* pos,
                                           const SplitRow& w, int parts) {
  const RowChunkSource<T, kBlocks> src = ChunkOf<T, kBlocks>(a, row, chunk, part);
  float first[kPer];
  LoadFirstRound(src, first);
  const int32_t count = StreamPastBar(sh, a, src, keys, pos, 1, false, first);
  StoreSlot(sh, a, keys, pos, count, a.k, w, part, SplitRow::kRestreamCounts);
  __threadfence();  // this thread's slot stores are seen device-wide before the arrival below
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.last = atomicAdd(w.words + SplitRow::kArrived, 1u) == uint32_t(parts - 1);
    __threadfence();
  }
  __syncthreads();
  return sh.last != 0;
}

// Split rows, kernel 2: the row's first CTA gathers the slots and cuts; where fewer than k keys
// reached a row bar, every CTA restreams and the last to arrive gathers.
template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    FilterMergeKernel(TopkArgs a, int64_t chunk, int parts) {
  extern __shared__ uint32_t dyn[];
  __shared__ Shared sh;
  const auto [keys, pos, row, part] = SplitCtaOf(dyn, parts);
  const SplitRow w = SplitRowOf(a, row, parts);
  WaitPrimaryGrid();  // every slot of the streaming kernel is stored and visible
  DSV41_STAMP(7);
  int32_t count = SlotOffsets(sh, w, parts, SplitRow::kCounts);
  if (count < a.k && __ldcg(w.words + SplitRow::kBar) > 1) {  // uniform over the row
    const bool last = ByMode(a, [&](auto blocks) {
      return RestreamChunk<T, blocks.value>(sh, a, row, chunk, part, keys, pos, w, parts);
    });
    if (!last) return;
    count = SlotOffsets(sh, w, parts, SplitRow::kRestreamCounts);
  } else if (part != 0) {
    return;
  }
  DSV41_STAMP(8);
  GatherSlots(sh, keys, pos, w, count);
  DSV41_STAMP(9);
  if (count > a.k) {
    CutToTopK(sh, keys, pos, count, a.k, true);
    count = a.k;
  }
  int32_t* out = a.out + row * int64_t(a.k);
  for (int32_t i = threadIdx.x; i < a.k; i += kThreads) out[i] = i < count ? pos[i] : -1;
  DSV41_STAMP(10);
}

constexpr size_t kBufferSmem = size_t(2 * kCap) * sizeof(uint32_t);

ClusterWaves g_waves[2];  // unmasked, masked rows; recorded by PrepareFilterTopk

template <class T>
cudaError_t LaunchSplit(const TopkArgs& args, int parts, cudaStream_t stream) {
  int64_t chunk = (args.n + parts - 1) / parts;
  chunk = (chunk + kPer - 1) / kPer * kPer;  // whole 8-score vectors: aligned rows stay aligned
  const dim3 grid(unsigned(args.rows * parts)), block(kThreads);
  const cudaError_t err =
      LaunchKernel(FilterSplitKernel<T>, grid, block, kBufferSmem, stream, 0, args, chunk, parts);
  if (err != cudaSuccess) return err;
  // The merge is a programmatic dependent launch: its CTAs start as the streaming kernel's CTAs
  // exit, not after the whole grid.
  return LaunchDependentKernel(FilterMergeKernel<T>, grid, block, kBufferSmem, stream, args, chunk,
                               parts);
}

// The CTAs each of `rows` unmasked rows of `n` scores takes split on a device of `sms` SMs (0:
// not split): one CTA an SM, at most kSplitMaxParts, a whole round a chunk, and a chunk's slot
// (kCap / parts pairs) holding k. The launcher splits where that beats the CTAs a row its
// clusters would take.
int64_t FilterSplitParts(int64_t rows, int64_t n, int32_t k, int sms) {
  if (rows < 1 || rows > kFilterSplitMaxRows || sms < 1 || k < 1) return 0;
  const int64_t parts = std::min({int64_t(kSplitMaxParts), sms / rows, n / kRound, kCap / k});
  return parts >= 2 ? parts : 0;
}

template <class T, bool kMasked>
cudaError_t Launch(const TopkArgs& args, size_t smem, cudaStream_t stream) {
  // Split a row while the doubled clusters still run in one wave (a second wave starts only as
  // the first ends: slower at 20-100 rows on the H200, BENCHMARKS_HISTORY.md), each chunk keeps
  // at least one whole round and the first CTA can hold every chunk's top k. Masked rows split
  // their candidate positions.
  const int64_t elems = kMasked ? args.num_members * args.block_size : args.n;
  int cl = 1;
  while (cl < kMaxCluster && g_waves[kMasked].OneWave(args.rows, 2 * cl) &&
         elems / (2 * cl) >= kRound && 2 * cl * int64_t(args.k) <= kCap) {
    cl *= 2;
  }
  if (!kMasked && args.workspace != nullptr &&
      args.workspace_words >= args.rows * kFilterSplitRowWords) {
    const int64_t parts = FilterSplitParts(args.rows, args.n, args.k, g_waves[0].Sms());
    if (parts > cl) return LaunchSplit<T>(args, int(parts), stream);
  }
  int64_t chunk = (elems + cl - 1) / cl;
  if (kMasked) chunk = (chunk + kPer - 1) / kPer * kPer;  // whole 8-position vectors
  return topk::LaunchRowClusters(FilterTopkKernel<T, kMasked>, args, chunk, cl, kThreads, smem,
                                 stream);
}

}  // namespace

cudaError_t PrepareFilterTopk() {
  const cudaError_t err = SetMaxDynamicSmem(
      kBufferSmem + kFilterMaskSmem, FilterTopkKernel<float, false>,
      FilterTopkKernel<topk::Bf16, false>, FilterTopkKernel<float, true>,
      FilterTopkKernel<topk::Bf16, true>, FilterSplitKernel<float>, FilterSplitKernel<topk::Bf16>,
      FilterMergeKernel<float>, FilterMergeKernel<topk::Bf16>);
  // After the limit is raised (the occupancy calculator reads it); masked rows at their largest
  // mask.
  g_waves[0].Record(FilterTopkKernel<float, false>, kThreads, kBufferSmem, kMaxCluster);
  g_waves[1].Record(FilterTopkKernel<float, true>, kThreads, kBufferSmem + kFilterMaskSmem,
                    kMaxCluster);
  return err;
}

int64_t FilterTopkMaskBytes(int64_t n, int32_t block_size, int64_t num_members) {
  TopkArgs shape{};
  shape.n = n, shape.block_size = block_size;
  return (MaskWords(shape) + num_members) * int64_t(sizeof(uint32_t));
}

cudaError_t LaunchFilterTopk(const TopkArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  if (args.k <= 0 || args.k > kFilterMaxK) return cudaErrorInvalidValue;
  if (args.members == nullptr) {
    return args.bf16 ? Launch<topk::Bf16, false>(args, kBufferSmem, stream)
                     : Launch<float, false>(args, kBufferSmem, stream);
  }
  const int64_t mask = FilterTopkMaskBytes(args.n, args.block_size, args.num_members);
  if (args.mode != TopkMode::kPositions || mask > kFilterMaskSmem) return cudaErrorInvalidValue;
  const size_t smem = kBufferSmem + size_t(mask);
  return args.bf16 ? Launch<topk::Bf16, true>(args, smem, stream)
                   : Launch<float, true>(args, smem, stream);
}

}  // namespace dsv41
