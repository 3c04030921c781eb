// dsv41_logical_to_physical <-> LogicalToPhysicalFFI <-> dsv41_jax.logical_to_physical("ffi")
#include "common.h"
#include "smxx_page_transform.cuh"

namespace dsv41 {

static ffi::Error LogicalToPhysicalImpl(cudaStream_t stream, Buffer<ffi::S32> indices,
                                        Buffer<ffi::S32> block_table, Result<ffi::S32> out,
                                        int32_t page_size) {
  constexpr const char* kOp = "dsv41_logical_to_physical";
  const auto idx_dims = indices.dimensions();
  const auto bt_dims = block_table.dimensions();
  if (idx_dims.size() != 2 || bt_dims.size() != 2 || bt_dims[0] != idx_dims[0] || bt_dims[1] < 1) {
    return InvalidArgument(kOp, "expected indices [rows, k] and block_table [rows, pages >= 1]");
  }
  if (page_size <= 0) return InvalidArgument(kOp, "page_size must be positive");
  LaunchLogicalToPhysical(indices.typed_data(), block_table.typed_data(), out->typed_data(),
                          idx_dims[0], idx_dims[1], bt_dims[1], page_size, stream);
  return LastCudaError(kOp);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LogicalToPhysicalFFI, LogicalToPhysicalImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<Stream>()
                                  .Arg<Buffer<ffi::S32>>()  // indices [rows, k]
                                  .Arg<Buffer<ffi::S32>>()  // block_table [rows, max_pages]
                                  .Ret<Buffer<ffi::S32>>()  // out [rows, k]
                                  .Attr<int32_t>("page_size"),
                              kCmdBuffer);

}  // namespace dsv41
