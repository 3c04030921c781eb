// Phase timestamps for scripts/probes/topk_phases.cu and onchip_phases.cu: compiled in only there
// (DSV41_PHASE_STAMPS), thread 0 of each CTA records %globaltimer at a phase end. Empty in the
// library.
#pragma once

#ifdef DSV41_PHASE_STAMPS
__device__ unsigned long long g_phase_stamps[4096][16];
#define DSV41_STAMP(i)                                      \
  do {                                                      \
    if (threadIdx.x == 0) {                                 \
      unsigned long long t;                                 \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); \
      g_phase_stamps[blockIdx.x][i] = t;                    \
    }                                                       \
  } while (0)
#else
#define DSV41_STAMP(i) \
  do {                 \
  } while (0)
#endif
