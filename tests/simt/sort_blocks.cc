// The candidate-table sort kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(bitmap, SortBlocksSharedMemory)

#include "smxx_sort_blocks.cu"
