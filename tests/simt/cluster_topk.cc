// The cluster radix top-k kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include "shared_buffer.h"

SIMT_SHARED_BUFFER(dyn, ClusterTopkSharedMemory)

#include "smxx_cluster_topk.cu"
