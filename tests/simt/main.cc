// Runs one launcher of the project's kernels on a case file written by tests/selection.py:
//   kernels_emu filter|cluster|short CASE OUT (the top-k selects; format below)
//   kernels_emu filter:S CASE OUT          (the filter select on S SMs with a split-rows
//                                           workspace, poisoned: its split rows where they apply)
//   kernels_emu onchip:CL CASE OUT         (the on-chip select, clusters of CL; at RunOnChip)
//   kernels_emu sort CASE OUT              (the candidate-table sort; format at RunSort)
//   kernels_emu sort-every CASE OUT        (the sort of every block: RunSort without `selected`)
//   kernels_emu short-every CASE OUT       (the short select's top-k and the table of every
//                                           block; RunShortEveryBlock)
//   kernels_emu short-table CASE OUT       (the short select's top-C as the table; RunShortTable)
//   kernels_emu short-amax CASE OUT        (the short select writing block maxima too: after
//                                           `out`, float block_max [rows, ceil(n / block_size)])
//   kernels_emu l2p|mark|ragged CASE OUT   (formats at RunPageKernel)
// CASE: int64 rows, n, k, block_size, mode, has_starts, has_members, num_members, bf16; scores
// [rows, n] (float32, or bfloat16 bits); int32 lens [rows], starts [rows], members
// [rows, num_members]. OUT: int32 status,
// then int32 out [rows, k] (poisoned before the launch, so unwritten elements show).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "smxx_block_ops.cuh"
#include "smxx_cluster_topk.cuh"
#include "smxx_filter_topk.cuh"
#include "smxx_page_transform.cuh"
#include "smxx_ragged_rows.cuh"
#include "smxx_short_topk.cuh"
#include "smxx_sort_blocks.cuh"

namespace dsv41 {
std::pair<void*, std::size_t> FilterTopkSharedMemory();
std::pair<void*, std::size_t> ClusterTopkSharedMemory();
std::pair<void*, std::size_t> ShortTopkSharedMemory();
std::pair<void*, std::size_t> SortBlocksSharedMemory();
std::pair<void*, std::size_t> OnChipSelectSharedMemory();
cudaError_t LaunchOnChipSelectForTest(const float* scores, const int32_t* lens,
                                      const int32_t* blocks, int32_t* out, int64_t rows, int64_t n,
                                      int64_t nblocks, int32_t k, int cl);  // onchip_select.cc
}  // namespace dsv41

// Each CTA's dynamic shared memory starts as garbage (as on the GPU); the bytes past what the
// launch asked for hold a canary, and a kernel that wrote there fails the run.
static void GuardSharedMemory(std::pair<void*, std::size_t> (*buffer)()) {
  constexpr unsigned char kGarbage = 0xA5, kCanary = 0xCD;
  emu::on_cta_start = [buffer](size_t asked) {
    auto [p, bytes] = buffer();
    if (asked > bytes) {
      std::fprintf(stderr, "emu: %zu bytes of dynamic shared memory asked, %zu here\n", asked,
                   bytes);
      std::abort();
    }
    std::memset(p, kGarbage, asked);
    std::memset(static_cast<char*>(p) + asked, kCanary, bytes - asked);
  };
  emu::on_cta_end = [buffer](size_t asked) {
    auto [p, bytes] = buffer();
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = asked; i < bytes; ++i) {
      if (c[i] != kCanary) {
        std::fprintf(stderr, "emu: shared memory written at byte %zu, past the %zu asked\n", i,
                     asked);
        std::abort();
      }
    }
  };
}

template <class T>
static bool Read(std::FILE* f, std::vector<T>& v, size_t n) {
  v.resize(n);
  return n == 0 || std::fread(v.data(), sizeof(T), n, f) == n;
}

// A candidate table's OUT: int32 status, blocks [rows, c], count [rows], valid_lens [rows],
// physical [rows, c].
struct TableResult {
  std::vector<int32_t> blocks, count, valid, physical;  // poisoned before the launch
  TableResult(int64_t rows, int64_t c)
      : blocks(rows * c, 0x7eadbeef),
        count(rows, 0x7eadbeef),
        valid(rows, 0x7eadbeef),
        physical(rows * c, 0x7eadbeef) {}
  void Write(const char* out_path, int32_t status) const {
    std::FILE* o = std::fopen(out_path, "wb");
    std::fwrite(&status, 4, 1, o);
    for (const auto* v : {&blocks, &count, &valid, &physical}) {
      std::fwrite(v->data(), 4, v->size(), o);
    }
    std::fclose(o);
  }
};

// CASE: int64 rows, c, max_pages, block_size, page_size; int32 selected [rows, c], lens [rows],
// block_table [rows, max_pages]. OUT: int32 status, blocks [rows, c], count [rows], valid_lens
// [rows], physical [rows, c] (all poisoned before the launch). `every`: no `selected` in CASE, the
// sort of every block (SortBlocksArgs::selected null).
static int RunSort(const char* case_path, const char* out_path, bool every) {
  std::FILE* f = std::fopen(case_path, "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  std::vector<int32_t> selected, lens, table;
  if (!Read(f, h, 5)) return 2;
  const int64_t rows = h[0], c = h[1], pages = h[2];
  if (!Read(f, selected, every ? 0 : rows * c) || !Read(f, lens, rows) ||
      !Read(f, table, rows * pages)) {
    return 2;
  }
  std::fclose(f);
  TableResult t(rows, c);
  const dsv41::SortBlocksArgs args{every ? nullptr : selected.data(),
                                   lens.data(),
                                   table.data(),
                                   t.blocks.data(),
                                   t.count.data(),
                                   t.valid.data(),
                                   t.physical.data(),
                                   rows,
                                   c,
                                   pages,
                                   int32_t(h[3]),
                                   int32_t(h[4])};
  GuardSharedMemory(dsv41::SortBlocksSharedMemory);
  t.Write(out_path, dsv41::LaunchSortCandidateBlocks(args, nullptr));
  return 0;
}

// The short select writing a top-C's candidate table (ShortOutputs::table). CASE: int64 rows, n, c,
// block_size, max_pages, page_size; float block scores [rows, n], int32 lens [rows] (positions),
// block_table [rows, max_pages]. OUT as for RunSort.
static int RunShortTable(const char* case_path, const char* out_path) {
  std::FILE* f = std::fopen(case_path, "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  std::vector<float> scores;
  std::vector<int32_t> lens, table;
  if (!Read(f, h, 6)) return 2;
  const int64_t rows = h[0], n = h[1], c = h[2], pages = h[4];
  if (!Read(f, scores, rows * n) || !Read(f, lens, rows) || !Read(f, table, rows * pages)) {
    return 2;
  }
  std::fclose(f);
  TableResult t(rows, c);
  std::vector<int32_t> ids(rows * c, 0x7eadbeef);
  dsv41::TopkArgs args{scores.data(),
                       lens.data(),
                       nullptr,
                       nullptr,
                       ids.data(),
                       rows,
                       n,
                       0,
                       int32_t(c),
                       int32_t(h[3]),
                       dsv41::TopkMode::kCandidateBlocks,
                       false};
  const dsv41::ShortOutputs outputs{nullptr,
                                    {table.data(), t.blocks.data(), t.count.data(), t.valid.data(),
                                     t.physical.data(), pages, int32_t(h[5]), c}};
  GuardSharedMemory(dsv41::ShortTopkSharedMemory);
  int32_t status = dsv41::LaunchShortTopk(args, nullptr, outputs);
  // The ids are not the table's output: the select must leave them alone.
  for (const int32_t id : ids) status = id == 0x7eadbeef ? status : -1;
  t.Write(out_path, status);
  return 0;
}

// The short select's top-k writing the table of every block (ShortOutputs::every_block). CASE:
// int64 rows, n, k, c, block_size, max_pages, page_size; float scores [rows, n], int32 lens
// [rows], block_table [rows, max_pages]. OUT: the table as for RunSort, then int32 out [rows, k]
// (everything poisoned before the launch).
static int RunShortEveryBlock(const char* case_path, const char* out_path) {
  std::FILE* f = std::fopen(case_path, "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  std::vector<float> scores;
  std::vector<int32_t> lens, table;
  if (!Read(f, h, 7)) return 2;
  const int64_t rows = h[0], n = h[1], k = h[2], c = h[3], pages = h[5];
  if (!Read(f, scores, rows * n) || !Read(f, lens, rows) || !Read(f, table, rows * pages)) {
    return 2;
  }
  std::fclose(f);
  TableResult t(rows, c);
  std::vector<int32_t> out(rows * k, 0x7eadbeef);
  const dsv41::TopkArgs args{scores.data(),
                             lens.data(),
                             nullptr,
                             nullptr,
                             out.data(),
                             rows,
                             n,
                             0,
                             int32_t(k),
                             int32_t(h[4]),
                             dsv41::TopkMode::kPositions,
                             false};
  dsv41::ShortOutputs outputs;
  outputs.every_block = {table.data(),      t.blocks.data(), t.count.data(), t.valid.data(),
                         t.physical.data(), pages,           int32_t(h[6]),  c};
  GuardSharedMemory(dsv41::ShortTopkSharedMemory);
  const int32_t status = dsv41::LaunchShortTopk(args, nullptr, outputs);
  t.Write(out_path, status);
  std::FILE* o = std::fopen(out_path, "ab");
  std::fwrite(out.data(), 4, out.size(), o);
  std::fclose(o);
  return 0;
}

// CASE: int64 header h[8]; then the kernel's arrays. OUT: int32 status, then the output array
// (poisoned with 0x7e bytes before the launch, so unwritten elements show).
//   l2p:    h = {rows, k, max_pages, page_size}; int32 indices [rows, k], block_table
//           [rows, max_pages] -> int32 out [rows, k]
//   ragged: h = {rows, rows_padded, cols}; int32 starts [rows], ends [rows] -> float logits
//           [rows, cols] (poisoned), then uint32 ranges [2 * rows_padded]
//   amax:   h = {rows, stride, n, nb, block_size, pin_newest}; float scores [rows, stride], int32
//           lens [rows] -> float out [rows, nb]
//   cols:   h = {rows, k, c, block_size}; int32 columns [rows, k], blocks [rows, c] -> int32
//           out [rows, k]
static int RunPageKernel(const std::string& which, const char* case_path, const char* out_path) {
  std::FILE* f = std::fopen(case_path, "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  if (!Read(f, h, 8)) return 2;
  emu::on_cta_start = nullptr, emu::on_cta_end = nullptr;  // no dynamic shared memory
  std::vector<uint8_t> out;
  if (which == "l2p") {
    std::vector<int32_t> indices, table, result(h[0] * h[1], 0x7e7e7e7e);
    if (!Read(f, indices, h[0] * h[1]) || !Read(f, table, h[0] * h[2])) return 2;
    dsv41::LaunchLogicalToPhysical(indices.data(), table.data(), result.data(), h[0], h[1], h[2],
                                   int32_t(h[3]), nullptr);
    out.assign(reinterpret_cast<uint8_t*>(result.data()),
               reinterpret_cast<uint8_t*>(result.data() + result.size()));
  } else if (which == "ragged") {
    std::vector<int32_t> starts, ends;
    if (!Read(f, starts, h[0]) || !Read(f, ends, h[0])) return 2;
    std::vector<float> logits(h[0] * h[2]);
    std::vector<uint32_t> ranges(2 * h[1], 0x7e7e7e7eu);
    std::memset(logits.data(), 0x7e, logits.size() * 4);
    dsv41::LaunchPrepareRaggedRows<float>(nullptr, logits.data(), h[2], starts.data(), ends.data(),
                                          h[0], h[1], ranges.data());
    out.assign(reinterpret_cast<uint8_t*>(logits.data()),
               reinterpret_cast<uint8_t*>(logits.data() + logits.size()));
    out.insert(out.end(), reinterpret_cast<uint8_t*>(ranges.data()),
               reinterpret_cast<uint8_t*>(ranges.data() + ranges.size()));
  } else if (which == "amax") {
    std::vector<float> scores, result(h[0] * h[3]);
    std::vector<int32_t> lens;
    if (!Read(f, scores, h[0] * h[1]) || !Read(f, lens, h[0])) return 2;
    std::memset(result.data(), 0x7e, result.size() * 4);
    dsv41::LaunchBlockAmax(scores.data(), h[1], h[2], lens.data(), h[0], int32_t(h[4]), h[5] != 0,
                           result.data(), h[3], nullptr);
    out.assign(reinterpret_cast<uint8_t*>(result.data()),
               reinterpret_cast<uint8_t*>(result.data() + result.size()));
  } else if (which == "cols") {
    std::vector<int32_t> columns, blocks, result(h[0] * h[1], 0x7e7e7e7e);
    if (!Read(f, columns, h[0] * h[1]) || !Read(f, blocks, h[0] * h[2])) return 2;
    dsv41::LaunchColumnsToPositions(columns.data(), blocks.data(), h[0], h[1], h[2], int32_t(h[3]),
                                    result.data(), nullptr);
    out.assign(reinterpret_cast<uint8_t*>(result.data()),
               reinterpret_cast<uint8_t*>(result.data() + result.size()));
  } else {
    return 2;
  }
  std::fclose(f);
  std::FILE* o = std::fopen(out_path, "wb");
  const int32_t status = 0;
  std::fwrite(&status, 4, 1, o);
  std::fwrite(out.data(), 1, out.size(), o);
  std::fclose(o);
  return 0;
}

// The top-k CASE format with float scores (bf16 = 0) and members [rows, num_members] = each row's
// candidate blocks (block_size 8: column j of the row is position blocks[j / 8] * 8 + j % 8);
// mode, has_starts and the starts are ignored. OUT as for the top-k selects.
static int RunOnChip(int cl, const char* case_path, const char* out_path) {
  std::FILE* f = std::fopen(case_path, "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  std::vector<float> scores;
  std::vector<int32_t> lens, starts, blocks;
  if (!Read(f, h, 9)) return 2;
  const int64_t rows = h[0], n = h[1], k = h[2], m = h[7];
  if (k < 0 || h[3] != 8 || h[8] != 0 || !Read(f, scores, rows * n) || !Read(f, lens, rows) ||
      !Read(f, starts, rows) || !Read(f, blocks, rows * m)) {
    return 2;
  }
  std::fclose(f);
  std::vector<int32_t> out(rows * k, 0x7eadbeef);
  GuardSharedMemory(dsv41::OnChipSelectSharedMemory);
  const int32_t status = dsv41::LaunchOnChipSelectForTest(scores.data(), lens.data(), blocks.data(),
                                                          out.data(), rows, n, m, int32_t(k), cl);
  std::FILE* o = std::fopen(out_path, "wb");
  std::fwrite(&status, 4, 1, o);
  std::fwrite(out.data(), 4, out.size(), o);
  std::fclose(o);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const std::string which = argv[1];
  if (which == "sort" || which == "sort-every") return RunSort(argv[2], argv[3], which != "sort");
  if (which == "short-every") return RunShortEveryBlock(argv[2], argv[3]);
  if (which == "short-table") return RunShortTable(argv[2], argv[3]);
  if (which.rfind("onchip:", 0) == 0) return RunOnChip(std::atoi(argv[1] + 7), argv[2], argv[3]);
  if (which == "l2p" || which == "ragged" || which == "amax" || which == "cols") {
    return RunPageKernel(which, argv[2], argv[3]);
  }
  std::FILE* f = std::fopen(argv[2], "rb");
  if (!f) return 2;
  std::vector<int64_t> h;
  std::vector<float> scores;
  std::vector<uint16_t> scores16;
  std::vector<int32_t> lens, starts, members;
  if (!Read(f, h, 9)) return 2;
  const int64_t rows = h[0], n = h[1], k = h[2], m = h[7];
  const bool bf16 = h[8] != 0;
  const bool scores_read = bf16 ? Read(f, scores16, rows * n) : Read(f, scores, rows * n);
  if (!scores_read || !Read(f, lens, rows) || !Read(f, starts, rows) ||
      !Read(f, members, rows * m)) {
    return 2;
  }
  std::fclose(f);
  std::vector<int32_t> out(rows * k, 0x7eadbeef);
  const void* data = bf16 ? static_cast<const void*>(scores16.data()) : scores.data();
  dsv41::TopkArgs args{data,
                       lens.data(),
                       h[5] ? starts.data() : nullptr,
                       h[6] ? members.data() : nullptr,
                       out.data(),
                       rows,
                       n,
                       h[6] ? m : 0,
                       int32_t(k),
                       int32_t(h[3]),
                       static_cast<dsv41::TopkMode>(h[4]),
                       bf16};
  cudaError_t err = cudaErrorInvalidValue;
  std::vector<uint32_t> workspace;
  std::vector<float> block_max;  // short-amax: [rows, ceil(n / block_size)], poisoned
  if (which == "short-amax") {
    block_max.resize(size_t(rows * ((n + h[3] - 1) / h[3])));
    std::memset(block_max.data(), 0x7e, block_max.size() * 4);
  }
  if (which.rfind("filter:", 0) == 0) {  // an SM count the launcher reads, then a workspace
    emu_sm_count = std::atoi(which.c_str() + 7);
    if (dsv41::PrepareFilterTopk() != cudaSuccess) return 2;
    workspace.assign(size_t(rows * dsv41::kFilterSplitRowWords), 0xA5A5A5A5u);
    args.workspace = workspace.data();
    args.workspace_words = int64_t(workspace.size());
  }
  if (which.rfind("filter", 0) == 0) {
    GuardSharedMemory(dsv41::FilterTopkSharedMemory);
    err = dsv41::LaunchFilterTopk(args, nullptr);
  } else if (which == "short" || which == "short-amax") {
    GuardSharedMemory(dsv41::ShortTopkSharedMemory);
    float* max_out = which == "short-amax" ? block_max.data() : nullptr;
    err = dsv41::LaunchShortTopk(args, nullptr, dsv41::ShortOutputs{max_out, {}});
  } else if (which == "cluster") {
    GuardSharedMemory(dsv41::ClusterTopkSharedMemory);
    err = dsv41::LaunchClusterTopk(args, nullptr);
  }
  std::FILE* o = std::fopen(argv[3], "wb");
  const int32_t status = err;
  std::fwrite(&status, 4, 1, o);
  std::fwrite(out.data(), 4, out.size(), o);
  std::fwrite(block_max.data(), 4, block_max.size(), o);
  std::fclose(o);
  return 0;
}
