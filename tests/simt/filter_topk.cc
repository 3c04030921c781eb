// The filter-first top-k kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(dyn, FilterTopkSharedMemory)

#include "smxx_filter_topk.cu"
