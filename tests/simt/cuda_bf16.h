// The bfloat16 type as the ragged-rows kernel uses it, for the CPU stand-in (cuda_runtime.h).
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16(float f) {  // round to nearest even (no NaN inputs here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
