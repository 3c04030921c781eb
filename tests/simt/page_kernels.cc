// The page kernels (gather of candidate blocks, logical -> physical, invalid-page marking),
// compiled for the CPU stand-in (cuda_runtime.h). They use no dynamic shared memory.
#include "smxx_gather_blocks.cu"
#include "smxx_page_transform.cu"
