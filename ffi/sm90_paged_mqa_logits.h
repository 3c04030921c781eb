// DeepGEMM's SM90 dense paged logits as the handlers use them: the limits their callers size
// buffers by, and the checked call that the paged-logits custom call and the fused indexer
// layers (sm90_indexer_layers.cu) share.
#pragma once

#include <cstdint>

#include "common.h"

namespace dsv41 {

// Rows of the schedule workspace result ([rows, 2] int32): one per SM plus one, for up to 256 SMs.
inline constexpr int64_t kSm90ScheduleRows = 257;
// Requests of one call: the largest schedule instantiated (DeepGEMM's, per SM count).
inline constexpr int64_t kSm90MaxBatch = 1024;

// One paged-logits call: fp8 q [batch, next_n, heads, 128], weights [batch, next_n, heads], the
// cache [num_pages, 64, 1, 132], block_table [batch, max_pages], logits [batch * next_n, cols].
struct Sm90PagedLogits {
  const void* q;
  const float* weights;
  const uint8_t* kv;
  const int32_t* block_table;
  float* logits;
  int64_t batch, next_n, heads, num_pages, max_pages, cols;
};

// The call over these buffers, or InvalidArgument (naming `op`) for shapes the kernel lacks.
ffi::ErrorOr<Sm90PagedLogits> Sm90PagedLogitsOf(const char* op, const ffi::AnyBuffer& q,
                                                const Buffer<ffi::F32>& weights,
                                                const Buffer<ffi::U8>& kv,
                                                const Buffer<ffi::S32>& block_table, float* logits,
                                                int64_t logits_rows, int64_t cols);

// DeepGEMM's schedule ([kSm90ScheduleRows, 2]) of `batch` requests of `next_n` rows over the
// clamped lengths `lens` [batch]: it depends on nothing else, so one serves every layer.
ffi::Error LaunchSm90Schedule(const char* op, cudaStream_t stream, int64_t batch, int64_t next_n,
                              const int32_t* lens, int32_t* schedule);

// The logits kernel over `lens` (clamped to the page table) with `schedule` computed from them.
ffi::Error LaunchSm90PagedLogits(const char* op, cudaStream_t stream, const Sm90PagedLogits& call,
                                 const int32_t* lens, const int32_t* schedule);

}  // namespace dsv41
