// The short-row top-k kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(dyn, ShortTopkSharedMemory)

#include "smxx_short_topk.cu"
