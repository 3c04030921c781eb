// DeepGEMM's SM100 paged sparse MQA logits: sizes the Python side needs, one-time preparation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

inline constexpr uint32_t kSm100SMs = 148;         // B200 / GB200: the schedule is built for it
inline constexpr uint32_t kMaxSparseBlocks = 2048;  // C, candidate blocks per row
inline constexpr uint32_t kSparseBlock = 8;         // B, positions per candidate block

int64_t Sm100SparseMetadataBytes(int64_t rows);
int64_t Sm100SparseWorkspaceBytes(int64_t rows);
// Kernel attributes on an SM100 device (a no-op elsewhere); outside any stream capture.
cudaError_t PreparePagedSparseMqaLogitsSm100();
cudaError_t PreparePagedMqaLogitsSm100();
cudaError_t PrepareMqaLogitsSm100();

}  // namespace dsv41
