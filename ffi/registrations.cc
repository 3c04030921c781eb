// The pybind11 module: one dict of FFI handler capsules, registered by dsv41_jax/_ext.py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common.h"

#include "sm100_paged_sparse_mqa_logits.h"
#include "sm90_paged_mqa_logits.h"
#include "sm90_sparse_logits.h"
#include "sm90_sparse_select.h"
#include "smxx_cluster_topk.cuh"
#include "smxx_filter_topk.cuh"
#include "smxx_ragged_rows.cuh"
#include "smxx_short_topk.cuh"
#include "smxx_sort_blocks.cuh"
#include "topk.h"

namespace dsv41 {
cudaError_t PreparePagedMqaLogitsSm90();
cudaError_t PrepareMqaLogitsSm90();
cudaError_t PrepareSparseLogitsSm90();
XLA_FFI_DECLARE_HANDLER_SYMBOL(LogicalToPhysicalFFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PagedMqaLogitsSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PagedMqaScheduleSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DenseSelectSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PublishSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SparseSelectSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SparseLogitsSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MqaLogitsSm90FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SortCandidateBlocksFFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ClusterTopkFFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(FilterTopkFFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShortTopkFFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PagedSparseMqaLogitsSm100FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PagedMqaLogitsSm100FFI);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MqaLogitsSm100FFI);
}  // namespace dsv41

namespace {

template <typename T>
pybind11::capsule Capsule(T* fn) {
  return pybind11::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

PYBIND11_MODULE(_dsv41_jax_ext, m) {
  m.doc() = "dsv41_jax CUDA extension: XLA FFI handlers for DeepGEMM and the selection kernels";
  // Limits the Python wrappers size buffers and decline by: read from here, never mirrored.
  pybind11::dict limits;
  limits["sm90_schedule_rows"] = dsv41::kSm90ScheduleRows;
  limits["sm90_max_batch"] = dsv41::kSm90MaxBatch;
  limits["sm90_sparse_max_rows"] = dsv41::kSm90SparseMaxRows;
  limits["sm100_sparse_candidates"] = static_cast<int64_t>(dsv41::kMaxSparseBlocks);
  limits["sm100_sparse_block"] = static_cast<int64_t>(dsv41::kSparseBlock);
  limits["mqa_row_padding"] = dsv41::kMqaRowPadding;
  limits["sm100_num_sms"] = static_cast<int64_t>(dsv41::kSm100SMs);
  limits["sm100_logits_split"] = static_cast<int64_t>(dsv41::kSm100LogitsSplit);
  limits["sm100_max_rows"] = dsv41::kSm100MaxRows;
  limits["sort_max_blocks"] = dsv41::kMaxSortBlocks;
  limits["sort_max_candidates"] = dsv41::kMaxSortCandidates;
  limits["filter_topk_max_k"] = dsv41::kFilterMaxK;
  limits["filter_topk_mask_smem"] = dsv41::kFilterMaskSmem;
  limits["filter_split_max_rows"] = dsv41::kFilterSplitMaxRows;
  limits["filter_split_row_words"] = dsv41::kFilterSplitRowWords;
  limits["short_topk_chunk"] = dsv41::kShortChunk;
  limits["short_topk_max_cluster"] = dsv41::kShortMaxCluster;
  limits["topk_mode_positions"] = static_cast<int32_t>(dsv41::TopkMode::kPositions);
  limits["topk_mode_candidate_blocks"] = static_cast<int32_t>(dsv41::TopkMode::kCandidateBlocks);
  // The `select` attribute of the fused layers (dsv41::Select).
  limits["select_cluster"] = static_cast<int32_t>(dsv41::Select::kCluster);
  limits["select_filter"] = static_cast<int32_t>(dsv41::Select::kFilter);
  limits["select_short"] = static_cast<int32_t>(dsv41::Select::kShort);
  limits["select_onchip"] = dsv41::kSelectOnChip;  // the sparse layers only
  limits["onchip_max_columns"] = dsv41::SparseSelectMaxColumns();
  m.attr("LIMITS") = limits;
  m.def("registrations", []() {
    pybind11::dict d;
    d["dsv41_logical_to_physical"] = Capsule(dsv41::LogicalToPhysicalFFI);
    d["dsv41_sm90_paged_mqa_logits"] = Capsule(dsv41::PagedMqaLogitsSm90FFI);
    d["dsv41_sm90_paged_mqa_schedule"] = Capsule(dsv41::PagedMqaScheduleSm90FFI);
    d["dsv41_sm90_dense_select"] = Capsule(dsv41::DenseSelectSm90FFI);
    d["dsv41_sm90_publish"] = Capsule(dsv41::PublishSm90FFI);
    d["dsv41_sm90_sparse_select"] = Capsule(dsv41::SparseSelectSm90FFI);
    d["dsv41_sm90_sparse_logits"] = Capsule(dsv41::SparseLogitsSm90FFI);
    d["dsv41_sm90_mqa_logits"] = Capsule(dsv41::MqaLogitsSm90FFI);
    d["dsv41_sort_candidate_blocks"] = Capsule(dsv41::SortCandidateBlocksFFI);
    d["dsv41_cluster_topk"] = Capsule(dsv41::ClusterTopkFFI);
    d["dsv41_filter_topk"] = Capsule(dsv41::FilterTopkFFI);
    d["dsv41_short_topk"] = Capsule(dsv41::ShortTopkFFI);
    d["dsv41_sm100_paged_sparse_mqa_logits"] = Capsule(dsv41::PagedSparseMqaLogitsSm100FFI);
    d["dsv41_sm100_paged_mqa_logits"] = Capsule(dsv41::PagedMqaLogitsSm100FFI);
    d["dsv41_sm100_mqa_logits"] = Capsule(dsv41::MqaLogitsSm100FFI);
    return d;
  });
  // Shared memory a masked filter top-k needs beyond its buffer (declined above the limit).
  m.def("filter_topk_mask_bytes", &dsv41::FilterTopkMaskBytes);
  // Workspace sizes of the SM100 sparse logits call (extra results of the FFI call).
  m.def("sm100_sparse_workspace_bytes", [](int64_t rows) {
    return pybind11::make_tuple(dsv41::Sm100SparseMetadataBytes(rows),
                                dsv41::Sm100SparseWorkspaceBytes(rows));
  });
  // Clusters of `cluster` short-row select CTAs the current device runs at once (0: unknown).
  m.def("short_topk_max_clusters", &dsv41::ShortTopkMaxActiveClusters);
  // CTAs a row of the one-kernel sparse select for (rows, C) on the current device (0: cannot).
  m.def("sparse_select_cluster_size", &dsv41::SparseSelectClusterSize);
  // Kernel attributes and device facts, set once per device before any call: the handlers
  // themselves must not make such calls (illegal while XLA captures a CUDA graph).
  m.def("prepare", []() {
    int count = 0, current = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      return std::string("no CUDA device");
    }
    cudaGetDevice(&current);
    std::string error;
    for (int d = 0; d < count && error.empty(); ++d) {
      cudaSetDevice(d);
      // Only kernels with an image for this device: the extension holds sm_90a and sm_100a code
      // (CMakeLists.txt); on another GPU the wrappers decline before any launch.
      int major = 0, minor = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
      const bool sm90 = major == 9 && minor == 0, sm100 = major == 10 && minor == 0;
      std::vector<cudaError_t (*)()> prepares;
      if (sm90 || sm100) {
        prepares = {dsv41::PrepareClusterTopk, dsv41::PrepareFilterTopk, dsv41::PrepareShortTopk,
                    dsv41::PrepareSortCandidateBlocks};
      }
      if (sm90) {
        prepares.insert(prepares.end(),
                        {dsv41::PreparePagedMqaLogitsSm90, dsv41::PrepareMqaLogitsSm90,
                         dsv41::PrepareSparseLogitsSm90, dsv41::PrepareSparseSelectSm90});
      }
      if (sm100) {
        prepares.insert(prepares.end(),
                        {dsv41::PreparePagedSparseMqaLogitsSm100, dsv41::PreparePagedMqaLogitsSm100,
                         dsv41::PrepareMqaLogitsSm100});
      }
      for (auto prepare : prepares) {
        if (cudaError_t err = prepare(); err != cudaSuccess) {
          error = "device " + std::to_string(d) + ": " + cudaGetErrorString(err);
          break;
        }
      }
    }
    cudaSetDevice(current);
    return error;
  });
}
