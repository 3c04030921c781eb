// Can an FFI handler of this jaxlib be recorded into XLA's command buffers without stream
// capture (the FFI Record API: explicit kernel and memcpy graph nodes, cheap updates)?
//
// The CUDA PJRT plugin registers only an `execute` handler per target, so ProbeBootstrap (an
// ordinary custom call, run once) takes the XLA_FFI_Api of its call frame and registers two
// targets with a full bundle: `probe_copy_record` (a D2D memcpy node) and `probe_add_record` (a
// kernel node from PTX embedded below). `probe_add_traced` is the same kernel as a plain
// traced handler. Counters say which stage ran how often.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "xla/ffi/api/ffi.h"
#include "xla/ffi/api/record_api.h"

namespace ffi = xla::ffi;

#include "probe_kernel.cuh"

#include "probe_add_one.ptx.h"  // kProbeAddOnePtx: the kernel above as PTX (nvcc -ptx)

namespace {

using RecordContext = ffi::internal::RecordContextBase<ffi::internal::ErrorPolicy>;
struct RecordExtension : ffi::internal::RecordExtensionBase<RecordContext> {};

std::atomic<int64_t> g_executes{0}, g_creates{0}, g_updates{0}, g_bootstraps{0};

ffi::Error AddExecute(cudaStream_t stream, ffi::Buffer<ffi::F32> in,
                      ffi::ResultBuffer<ffi::F32> out) {
  ++g_executes;
  int n = int(in.element_count());
  probe_add_one<<<(n + 255) / 256, 256, 0, stream>>>(out->typed_data(), in.typed_data(), n);
  return cudaGetLastError() == cudaSuccess ? ffi::Error::Success()
                                           : ffi::Error::Internal("launch failed");
}

ffi::Error CopyExecute(cudaStream_t stream, ffi::Buffer<ffi::F32> in,
                       ffi::ResultBuffer<ffi::F32> out) {
  ++g_executes;
  cudaMemcpyAsync(out->typed_data(), in.typed_data(), in.size_bytes(), cudaMemcpyDeviceToDevice,
                  stream);
  return ffi::Error::Success();
}

ffi::Error AddRecord(RecordContext ctx, ffi::Buffer<ffi::F32> in, ffi::ResultBuffer<ffi::F32> out) {
  void* o = out->typed_data();
  const void* i = in.typed_data();
  int n = int(in.element_count());
  const std::array<ffi::KernelArg, 3> args = {ffi::DevicePointer{o},
                                              ffi::DevicePointer{const_cast<void*>(i)},
                                              ffi::HostValue{&n, sizeof(n)}};
  if (ctx.action() == ffi::RecordAction::kCreate) {
    ++g_creates;
    XLA_FFI_LaunchDims dims{{(n + 255) / 256, 1, 1}, {256, 1, 1}, {0, 0, 0}};
    auto cmd = ctx.CreateLaunch("probe_add_one", kProbeAddOnePtx, sizeof(kProbeAddOnePtx),
                                ffi::SourceFormat::kPtx, dims, 0, false, args);
    return cmd.has_error() ? cmd.error() : ffi::Error::Success();
  }
  ++g_updates;
  return ctx.UpdateLaunch(ctx.commands()[0], args);
}

ffi::Error CopyRecord(RecordContext ctx, ffi::Buffer<ffi::F32> in,
                      ffi::ResultBuffer<ffi::F32> out) {
  void* o = out->typed_data();
  void* i = const_cast<float*>(in.typed_data());
  if (ctx.action() == ffi::RecordAction::kCreate) {
    ++g_creates;
    auto cmd = ctx.CreateMemcpyD2D(o, i, in.size_bytes());
    return cmd.has_error() ? cmd.error() : ffi::Error::Success();
  }
  ++g_updates;
  return ctx.UpdateMemcpyD2D(ctx.commands()[0], o, i, in.size_bytes());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeAddExecute, AddExecute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeCopyExecute, CopyExecute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeAddRecord, AddRecord,
                              ffi::Ffi::BindRecord()
                                  .Ctx<ffi::Extension<RecordExtension>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(ProbeCopyRecord, CopyRecord,
                              ffi::Ffi::BindRecord()
                                  .Ctx<ffi::Extension<RecordExtension>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

namespace {

XLA_FFI_Error* Register(const XLA_FFI_Api* api, const char* name, XLA_FFI_Handler* execute,
                        XLA_FFI_Handler* record) {
  XLA_FFI_Handler_Register_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE;
  args.name = XLA_FFI_ByteSpan{name, std::strlen(name)};
  args.platform = XLA_FFI_ByteSpan{"CUDA", 4};
  args.bundle.execute = execute;
  args.bundle.record = record;
  args.traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
  return api->XLA_FFI_Handler_Register(&args);
}

ffi::Error BootstrapImpl(ffi::Buffer<ffi::F32>, ffi::ResultBuffer<ffi::F32>) {
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(BootstrapTyped, BootstrapImpl,
                       ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());

extern "C" {

int64_t g_bootstrap_error = 0;
char g_bootstrap_message[512] = {0};

// An execute handler that registers the record-capable targets through its call frame's API.
XLA_FFI_Error* ProbeBootstrap(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start == nullptr && frame->stage == XLA_FFI_ExecutionStage_EXECUTE &&
      g_bootstraps++ == 0) {
    for (auto [name, exec, rec] :
         {std::tuple{"probe_add_record", ProbeAddExecute, ProbeAddRecord},
          std::tuple{"probe_copy_record", ProbeCopyExecute, ProbeCopyRecord}}) {
      if (XLA_FFI_Error* err = Register(frame->api, name, exec, rec)) {
        g_bootstrap_error = 1;
        const auto details = ffi::internal::GetErrorDetails(frame->api, err);
        std::strncpy(g_bootstrap_message, details.message, sizeof(g_bootstrap_message) - 1);
      }
    }
  }
  return BootstrapTyped(frame);
}

void ProbeCounters(int64_t* out) {
  out[0] = g_executes;
  out[1] = g_creates;
  out[2] = g_updates;
  out[3] = g_bootstraps;
  out[4] = g_bootstrap_error;
}

const char* ProbeMessage() { return g_bootstrap_message; }

}  // extern "C"
