// Limits of the dsv41_sm90_paged_mqa_logits handler that its callers size buffers by.
#pragma once

#include <cstdint>

namespace dsv41 {

// Rows of the schedule workspace result ([rows, 2] int32): one per SM plus one, for up to 256 SMs.
inline constexpr int64_t kSm90ScheduleRows = 257;

}  // namespace dsv41
