// DeepGEMM's SM100 paged sparse MQA logits: sizes the Python side needs, one-time preparation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv41 {

inline constexpr uint32_t kSm100SMs = 148;          // B200 / GB200: the schedule is built for it
inline constexpr uint32_t kMaxSparseBlocks = 2048;  // C, candidate blocks per row
inline constexpr uint32_t kSparseBlock = 8;         // B, positions per candidate block
// The SM100 dense and ragged logits kernels: positions per split (their logits rows are whole
// splits wide) and the most query rows the dense kernel's metadata (2 words per row in shared
// memory) takes.
inline constexpr uint32_t kSm100LogitsSplit = 384;
inline constexpr int64_t kSm100MaxRows = 16384;

int64_t Sm100SparseMetadataBytes(int64_t rows);
int64_t Sm100SparseWorkspaceBytes(int64_t rows);
// Kernel attributes on an SM100 device (a no-op elsewhere); outside any stream capture.
cudaError_t PreparePagedSparseMqaLogitsSm100();
cudaError_t PreparePagedMqaLogitsSm100();
cudaError_t PrepareMqaLogitsSm100();

}  // namespace dsv41
