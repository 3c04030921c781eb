// Limits of the dsv41_sm90_mqa_logits handler that its callers size buffers by.
#pragma once

#include <cstdint>

namespace dsv41 {

// Query rows per kernel block at the fewest heads (128 rows x heads / 32 heads): the ranges
// workspace holds 2 x (rows + this) entries, enough for the rows rounded up to a whole block.
inline constexpr int64_t kSm90MqaRowPadding = 4;

}  // namespace dsv41
