// The probe's kernel: compiled into the library (execute stage) and, as PTX, handed to XLA's
// Record API (record stage).
#pragma once
extern "C" __global__ void probe_add_one(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}
