// The page and block kernels (logical -> physical, block scores, sparse columns -> positions),
// compiled for the CPU stand-in (cuda_runtime.h). They use no dynamic shared memory.
#include "smxx_block_ops.cu"
#include "smxx_page_transform.cu"
