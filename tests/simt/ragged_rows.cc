// The ragged (prefill) rows kernel, compiled for the CPU stand-in (cuda_runtime.h).
#include "smxx_ragged_rows.cu"
