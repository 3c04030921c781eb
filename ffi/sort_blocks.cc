// dsv41_sort_candidate_blocks <-> SortCandidateBlocksFFI <-> dsv41_jax.sort_candidate_blocks("ffi")
#include "common.h"
#include "smxx_sort_blocks.cuh"

namespace dsv41 {

static ffi::Error SortCandidateBlocksImpl(cudaStream_t stream, Buffer<ffi::S32> selected,
                                          Buffer<ffi::S32> lens, Buffer<ffi::S32> block_table,
                                          Result<ffi::S32> blocks, Result<ffi::S32> count,
                                          Result<ffi::S32> valid_lens, Result<ffi::S32> physical,
                                          int32_t block_size, int32_t page_size) {
  constexpr const char* kOp = "dsv41_sort_candidate_blocks";
  const auto sd = selected.dimensions(), bd = block_table.dimensions();
  if (sd.size() != 2 || bd.size() != 2 || bd[0] != sd[0] || bd[1] < 1 ||
      lens.element_count() != sd[0] || blocks->element_count() != selected.element_count() ||
      physical->element_count() != selected.element_count() || count->element_count() != sd[0] ||
      valid_lens->element_count() != sd[0]) {
    return InvalidArgument(kOp,
                           "expected selected [rows, C], lens [rows], block_table [rows, pages]");
  }
  if (block_size <= 0 || page_size <= 0 || page_size % block_size != 0) {
    return InvalidArgument(kOp, "page_size must be a positive multiple of block_size");
  }
  if ((bd[1] * page_size + block_size - 1) / block_size > kMaxSortBlocks) {
    return InvalidArgument(kOp, "rows longer than 2^20 blocks are not supported");
  }
  if (sd[1] > kMaxSortCandidates) {
    return InvalidArgument(kOp, "tables wider than 4096 candidates are not supported");
  }
  const SortBlocksArgs args{selected.typed_data(),
                            lens.typed_data(),
                            block_table.typed_data(),
                            blocks->typed_data(),
                            count->typed_data(),
                            valid_lens->typed_data(),
                            physical->typed_data(),
                            sd[0],
                            sd[1],
                            bd[1],
                            block_size,
                            page_size};
  if (cudaError_t err = LaunchSortCandidateBlocks(args, stream); err != cudaSuccess) {
    return ffi::Error::Internal(std::string(kOp) + ": " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SortCandidateBlocksFFI, SortCandidateBlocksImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::S32>>()  // selected [rows, C], any order
                                  .Arg<Buffer<ffi::S32>>()  // lens [rows]
                                  .Arg<Buffer<ffi::S32>>()  // block_table [rows, max_pages]
                                  .Ret<Buffer<ffi::S32>>()  // blocks [rows, C]
                                  .Ret<Buffer<ffi::S32>>()  // count [rows]
                                  .Ret<Buffer<ffi::S32>>()  // valid_lens [rows]
                                  .Ret<Buffer<ffi::S32>>()  // physical [rows, C]
                                  .Attr<int32_t>("block_size")
                                  .Attr<int32_t>("page_size"),
                              kCmdBuffer);

}  // namespace dsv41
