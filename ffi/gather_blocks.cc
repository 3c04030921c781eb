// dsv41_gather_candidate_blocks <-> GatherCandidateBlocksFFI <-> sparse_paged_mqa_logits("ffi")
#include "common.h"
#include "smxx_gather_blocks.cuh"

namespace dsv41 {

static ffi::Error GatherCandidateBlocksImpl(cudaStream_t stream, Buffer<ffi::U8> cache,
                                            Buffer<ffi::S32> physical, Result<ffi::U8> out) {
  constexpr const char* kOp = "dsv41_gather_candidate_blocks";
  const auto cd = cache.dimensions(), pd = physical.dimensions(), od = out->dimensions();
  if (cd.size() != 4 || pd.size() != 2 || od.size() != 4) {
    return InvalidArgument(kOp, "expected cache [pages, 64, 1, 132], physical [rows, C], "
                                "out [rows * C / 8, 64, 1, 132]");
  }
  if (cd[1] != kGatherPageSize || cd[2] != 1 || cd[3] != kGatherHeadDim + 4 || od[1] != cd[1] ||
      od[2] != 1 || od[3] != cd[3]) {
    return InvalidArgument(kOp, "needs an fp8 cache of 64-token pages with head_dim 128");
  }
  const int64_t rows = pd[0], candidates = pd[1];
  if (candidates % 8 != 0 || od[0] != rows * candidates / 8) {
    return InvalidArgument(kOp, "C must be a multiple of 8 and out hold rows * C / 8 pages");
  }
  LaunchGatherCandidateBlocks(cache.typed_data(), cd[0], physical.typed_data(), rows, candidates,
                              out->typed_data(), stream);
  return LastCudaError(kOp);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(GatherCandidateBlocksFFI, GatherCandidateBlocksImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::U8>>()   // cache [pages, 64, 1, 132]
                                  .Arg<Buffer<ffi::S32>>()  // physical [rows, C] (slot // 8)
                                  .Ret<Buffer<ffi::U8>>(),  // compact cache [rows*C/8, 64, 1, 132]
                              kCmdBuffer);

}  // namespace dsv41
