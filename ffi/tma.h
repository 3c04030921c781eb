// TMA descriptors through the driver entry point: no libcuda link at build time.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <mutex>

namespace dsv41 {

// cuTensorMapEncodeTiled's signature (CUDA 12.0 ABI), spelled out: cudaTypedefs.h is not
// reliably includable after CUTLASS's headers.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn TensorMapEncoder() {
  static EncodeTiledFn fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &status) == cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiledFn>(ptr);
    }
  });
  return fn;
}

// A tiled map over a row-major tensor: `dims` innermost first (elements), `strides_bytes` for
// dims 1.. (bytes), `box` innermost first; boxes past the tensor read zeros, or NaN with
// CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA (float types). `l2` is the L2 fetch size
// (256 B suits boxes that large; a small scattered box wants less). Returns false when the
// driver rejects it.
inline bool EncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, const void* base,
                        std::initializer_list<uint64_t> dims,
                        std::initializer_list<uint64_t> strides_bytes,
                        std::initializer_list<uint32_t> box, CUtensorMapSwizzle swizzle,
                        CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                        CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  auto encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const uint32_t rank = static_cast<uint32_t>(dims.size());
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], e[5];
  uint32_t i = 0;
  for (uint64_t v : dims) d[i++] = v;
  i = 0;
  for (uint64_t v : strides_bytes) s[i++] = v;
  i = 0;
  for (uint32_t v : box) b[i++] = v;
  for (i = 0; i < rank; ++i) e[i] = 1;
  return encode(map, dtype, rank, const_cast<void*>(base), d, s, b, e,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2, oob_fill) == CUDA_SUCCESS;
}

// DeepGEMM's SM100 MXFP4 query maps, the same for its dense, ragged and sparse logits kernels:
// q [rows·heads, 128] packed e2m1 (64B-swizzled), sf_q [rows, heads] (4 ue8m0 per head) and
// weights [rows, heads] bf16, in boxes of `block_q` rows.
inline bool EncodeMxfp4QueryMaps(CUtensorMap* q_map, CUtensorMap* sf_map, CUtensorMap* w_map,
                                 const void* q, const void* sf_q, const void* weights,
                                 uint64_t rows, uint32_t heads, uint32_t block_q) {
  constexpr uint32_t kHeadDim = 128;
  return EncodeTiled(q_map, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, q, {kHeadDim, rows * heads},
                     {kHeadDim / 2}, {kHeadDim, block_q * heads}, CU_TENSOR_MAP_SWIZZLE_64B) &&
         EncodeTiled(sf_map, CU_TENSOR_MAP_DATA_TYPE_INT32, sf_q, {heads, rows}, {heads * 4},
                     {heads, block_q}, CU_TENSOR_MAP_SWIZZLE_NONE) &&
         EncodeTiled(w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, weights, {heads, rows}, {heads * 2},
                     {heads, block_q}, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace dsv41
