// dsv41_radix_topk  <-> RadixTopkFFI  <-> dsv41_jax.topk("ffi"), select_candidate_blocks("ffi")
// dsv41_filter_topk <-> FilterTopkFFI <-> dsv41_jax.topk.ffi.radix_topk(algorithm="filter")
// dsv41_short_topk  <-> ShortTopkFFI  <-> dsv41_jax.topk.ffi.radix_topk(algorithm="short")
// Same operands, attributes and output; the filter-first kernel takes k <= kFilterMaxK and a
// candidate mask whose bitmap and block list fit kFilterMaskSmem, the short-row kernel rows of
// at most kShortMaxCluster * kShortChunk scores.
#include "common.h"
#include "smxx_filter_topk.cuh"
#include "smxx_radix_topk.cuh"
#include "smxx_short_topk.cuh"

namespace dsv41 {

using TopkLauncher = cudaError_t (*)(const TopkArgs&, cudaStream_t);

enum class Select { kCluster, kFilter, kShort };

template <TopkLauncher kLaunch, Select kSelect>
static ffi::Error TopkImpl(cudaStream_t stream, ffi::AnyBuffer scores, Buffer<ffi::S32> lens,
                           Buffer<ffi::S32> starts, Buffer<ffi::S32> members, Result<ffi::S32> out,
                           int32_t k, int32_t block_size, int32_t mode, bool has_starts,
                           bool has_members) {
  constexpr bool kFilter = kSelect == Select::kFilter;
  constexpr const char* kOp = kFilter                      ? "dsv41_filter_topk"
                              : kSelect == Select::kShort ? "dsv41_short_topk"
                                                          : "dsv41_radix_topk";
  const auto sd = scores.dimensions(), md = members.dimensions(), od = out->dimensions();
  if (sd.size() != 2 || md.size() != 2 || od.size() != 2) {
    return InvalidArgument(kOp, "expected scores [rows, n], members [rows, m], out [rows, k]");
  }
  const int64_t rows = sd[0];
  const bool bf16 = scores.element_type() == ffi::BF16;
  if (!bf16 && scores.element_type() != ffi::F32) {
    return InvalidArgument(kOp, "scores must be float32 or bfloat16");
  }
  if (lens.element_count() != rows || starts.element_count() != rows || md[0] != rows ||
      od[0] != rows || od[1] != k) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (k <= 0 || block_size <= 0 || (mode != 0 && mode != 1)) {
    return InvalidArgument(kOp, "k and block_size must be positive, mode 0 or 1");
  }
  if (has_members && (md[1] < 1 || mode != 0)) {
    return InvalidArgument(kOp, "has_members needs mode 0 and members [rows, m >= 1]");
  }
  if (kFilter && k > kFilterMaxK) {
    return InvalidArgument(kOp, "k must be <= " + std::to_string(kFilterMaxK));
  }
  if (kFilter && has_members && FilterTopkMaskBytes(sd[1], block_size, md[1]) > kFilterMaskSmem) {
    return InvalidArgument(kOp, "candidate mask too large for shared memory (see LIMITS)");
  }
  if (kSelect == Select::kShort && sd[1] > kShortMaxCluster * kShortChunk) {
    return InvalidArgument(kOp, "rows must have at most " +
                                    std::to_string(kShortMaxCluster * kShortChunk) + " scores");
  }
  if (sd[1] >= (int64_t(1) << 31) / (mode == 1 ? block_size : 1)) {
    return InvalidArgument(kOp, "rows must be shorter than 2^31 positions");
  }
  const TopkArgs args{scores.untyped_data(),
                      lens.typed_data(),
                      has_starts ? starts.typed_data() : nullptr,
                      has_members ? members.typed_data() : nullptr,
                      out->typed_data(),
                      rows,
                      sd[1],
                      has_members ? md[1] : 0,
                      k,
                      block_size,
                      static_cast<TopkMode>(mode),
                      bf16};
  if (cudaError_t err = kLaunch(args, stream); err != cudaSuccess) {
    return ffi::Error::Internal(std::string(kOp) + ": " + cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

#define DSV41_TOPK_BINDING                                                                   \
  ffi::Ffi::Bind()                                                                           \
      .Ctx<Stream>()                                                                         \
      .Arg<ffi::AnyBuffer>() /* scores [rows, n] float32 or bfloat16 */                     \
      .Arg<Buffer<ffi::S32>>() /* lens [rows] */                                             \
      .Arg<Buffer<ffi::S32>>() /* starts [rows] (read if has_starts) */                      \
      .Arg<Buffer<ffi::S32>>() /* members [rows, m] (read if has_members) */                 \
      .Ret<Buffer<ffi::S32>>() /* out [rows, k] */                                           \
      .Attr<int32_t>("k")                                                                    \
      .Attr<int32_t>("block_size")                                                           \
      .Attr<int32_t>("mode")                                                                 \
      .Attr<bool>("has_starts")                                                              \
      .Attr<bool>("has_members")

XLA_FFI_DEFINE_HANDLER_SYMBOL(RadixTopkFFI, (TopkImpl<LaunchRadixTopk, Select::kCluster>),
                              DSV41_TOPK_BINDING, kCmdBuffer);
XLA_FFI_DEFINE_HANDLER_SYMBOL(FilterTopkFFI, (TopkImpl<LaunchFilterTopk, Select::kFilter>),
                              DSV41_TOPK_BINDING, kCmdBuffer);
XLA_FFI_DEFINE_HANDLER_SYMBOL(ShortTopkFFI, (TopkImpl<LaunchShortTopk, Select::kShort>),
                              DSV41_TOPK_BINDING, kCmdBuffer);

#undef DSV41_TOPK_BINDING

}  // namespace dsv41
