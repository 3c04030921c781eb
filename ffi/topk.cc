// dsv41_cluster_topk <-> ClusterTopkFFI <-> dsv41_jax.topk("ffi"), select_candidate_blocks("ffi")
// dsv41_filter_topk  <-> FilterTopkFFI  <-> dsv41_jax.topk.ffi.cuda_topk(algorithm="filter")
// dsv41_short_topk   <-> ShortTopkFFI   <-> dsv41_jax.topk.ffi.cuda_topk(algorithm="short")
// Same operands, attributes and output (the filter select adds a second result, its workspace);
// the filter-first kernel takes k <= kFilterMaxK and a candidate mask whose bitmap and block list
// fit kFilterMaskSmem, the short-row kernel rows of at most kShortMaxCluster * kShortChunk scores.
#include "topk.h"

#include "smxx_filter_topk.cuh"
#include "smxx_short_topk.cuh"

namespace dsv41 {

ffi::Error CheckTopk(const char* op, Select select, int64_t n, int64_t num_members,
                     bool has_members, int32_t k, int32_t block_size, int32_t mode) {
  if (k <= 0 || block_size <= 0 || (mode != 0 && mode != 1)) {
    return InvalidArgument(op, "k and block_size must be positive, mode 0 or 1");
  }
  if (has_members && (num_members < 1 || mode != 0)) {
    return InvalidArgument(op, "has_members needs mode 0 and members [rows, m >= 1]");
  }
  if (select == Select::kFilter && k > kFilterMaxK) {
    return InvalidArgument(op, "k must be <= " + std::to_string(kFilterMaxK));
  }
  if (select == Select::kFilter && has_members &&
      FilterTopkMaskBytes(n, block_size, num_members) > kFilterMaskSmem) {
    return InvalidArgument(op, "candidate mask too large for shared memory (see LIMITS)");
  }
  if (select == Select::kShort && n > kShortMaxCluster * kShortChunk) {
    return InvalidArgument(
        op, "rows must have at most " + std::to_string(kShortMaxCluster * kShortChunk) + " scores");
  }
  if (n >= (int64_t(1) << 31) / (mode == 1 ? block_size : 1)) {
    return InvalidArgument(op, "rows must be shorter than 2^31 positions");
  }
  return ffi::Error::Success();
}

cudaError_t LaunchTopk(Select select, const TopkArgs& args, cudaStream_t stream) {
  switch (select) {
    case Select::kCluster:
      return LaunchClusterTopk(args, stream);
    case Select::kFilter:
      return LaunchFilterTopk(args, stream);
    case Select::kShort:
      return LaunchShortTopk(args, stream);
  }
  return cudaErrorInvalidValue;
}

// `workspace`: the filter select's scratch words (its split rows), or nullptr.
template <Select kSelect>
static ffi::Error RunTopk(cudaStream_t stream, ffi::AnyBuffer scores, Buffer<ffi::S32> lens,
                          Buffer<ffi::S32> starts, Buffer<ffi::S32> members, Result<ffi::S32> out,
                          int32_t k, int32_t block_size, int32_t mode, bool has_starts,
                          bool has_members, uint32_t* workspace, int64_t workspace_words) {
  constexpr const char* kOp = kSelect == Select::kFilter  ? "dsv41_filter_topk"
                              : kSelect == Select::kShort ? "dsv41_short_topk"
                                                          : "dsv41_cluster_topk";
  const auto sd = scores.dimensions(), md = members.dimensions(), od = out->dimensions();
  if (sd.size() != 2 || md.size() != 2 || od.size() != 2) {
    return InvalidArgument(kOp, "expected scores [rows, n], members [rows, m], out [rows, k]");
  }
  const int64_t rows = sd[0];
  const bool bf16 = scores.element_type() == ffi::BF16;
  if (!bf16 && scores.element_type() != ffi::F32) {
    return InvalidArgument(kOp, "scores must be float32 or bfloat16");
  }
  // Operands not read (has_starts, has_members false) may be placeholders of any size: a [1]
  // or [1, 1] constant costs no fill kernel where one of [rows] would.
  if (lens.element_count() != rows || (has_starts && starts.element_count() != rows) ||
      (has_members && md[0] != rows) || od[0] != rows || od[1] != k) {
    return InvalidArgument(kOp, "inconsistent shapes");
  }
  if (auto e = CheckTopk(kOp, kSelect, sd[1], md[1], has_members, k, block_size, mode);
      e.failure()) {
    return e;
  }
  TopkArgs args{scores.untyped_data(),
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
  args.workspace = workspace;
  args.workspace_words = workspace_words;
  return CudaStatus(kOp, LaunchTopk(kSelect, args, stream));
}

template <Select kSelect>
static ffi::Error TopkImpl(cudaStream_t stream, ffi::AnyBuffer scores, Buffer<ffi::S32> lens,
                           Buffer<ffi::S32> starts, Buffer<ffi::S32> members, Result<ffi::S32> out,
                           int32_t k, int32_t block_size, int32_t mode, bool has_starts,
                           bool has_members) {
  return RunTopk<kSelect>(stream, scores, lens, starts, members, out, k, block_size, mode,
                          has_starts, has_members, nullptr, 0);
}

// The filter select's second result is its workspace: kFilterSplitRowWords a row where the rows
// may be split (dsv41_jax.topk.ffi.cuda_topk), else one word.
static ffi::Error FilterTopkImpl(cudaStream_t stream, ffi::AnyBuffer scores, Buffer<ffi::S32> lens,
                                 Buffer<ffi::S32> starts, Buffer<ffi::S32> members,
                                 Result<ffi::S32> out, Result<ffi::U32> workspace, int32_t k,
                                 int32_t block_size, int32_t mode, bool has_starts,
                                 bool has_members) {
  return RunTopk<Select::kFilter>(stream, scores, lens, starts, members, out, k, block_size, mode,
                                  has_starts, has_members, workspace->typed_data(),
                                  int64_t(workspace->element_count()));
}

#define DSV41_TOPK_OPERANDS                                                  \
  ffi::Ffi::Bind()                                                           \
      .Ctx<Stream>()                                                         \
      .Arg<ffi::AnyBuffer>()   /* scores [rows, n] float32 or bfloat16 */    \
      .Arg<Buffer<ffi::S32>>() /* lens [rows] */                             \
      .Arg<Buffer<ffi::S32>>() /* starts [rows] (read if has_starts) */      \
      .Arg<Buffer<ffi::S32>>() /* members [rows, m] (read if has_members) */ \
      .Ret<Buffer<ffi::S32>>() /* out [rows, k] */
#define DSV41_TOPK_ATTRS           \
  .Attr<int32_t>("k")              \
      .Attr<int32_t>("block_size") \
      .Attr<int32_t>("mode")       \
      .Attr<bool>("has_starts")    \
      .Attr<bool>("has_members")
#define DSV41_TOPK_BINDING DSV41_TOPK_OPERANDS DSV41_TOPK_ATTRS

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClusterTopkFFI, TopkImpl<Select::kCluster>, DSV41_TOPK_BINDING,
                              kCmdBuffer);
XLA_FFI_DEFINE_HANDLER_SYMBOL(FilterTopkFFI, FilterTopkImpl,
                              DSV41_TOPK_OPERANDS.Ret<Buffer<ffi::U32>>() /* workspace */
                              DSV41_TOPK_ATTRS,
                              kCmdBuffer);
XLA_FFI_DEFINE_HANDLER_SYMBOL(ShortTopkFFI, TopkImpl<Select::kShort>, DSV41_TOPK_BINDING,
                              kCmdBuffer);

#undef DSV41_TOPK_BINDING
#undef DSV41_TOPK_ATTRS
#undef DSV41_TOPK_OPERANDS

}  // namespace dsv41
