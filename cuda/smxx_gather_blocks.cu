#include "smxx_gather_blocks.cuh"
#include "smxx_launch.cuh"

namespace dsv41 {
namespace {

constexpr int64_t kPageBytes = kGatherPageSize * (kGatherHeadDim + 4);
constexpr int64_t kValueBytes = kGatherBlockSize * kGatherHeadDim;  // 1024 per block
constexpr int kThreads = 256;
constexpr int kBlocksPerCta = 8;  // one compact page
constexpr int kVecPerBlock = kValueBytes / 16;  // 64 16-byte vectors of values
constexpr int kScaleVecPerBlock = kGatherBlockSize * 4 / 16;  // 2 16-byte vectors of scales

// One CTA fills one compact page (8 blocks): every thread moves 16-byte vectors, all loads in
// flight before the stores (the copy is latency-bound at decode sizes).
__global__ void __launch_bounds__(kThreads) GatherCandidateBlocksKernel(
    const uint8_t* __restrict__ cache, int64_t num_pages, const int32_t* __restrict__ physical,
    int64_t candidates, uint8_t* __restrict__ out) {
  const int64_t page = blockIdx.x;  // compact page = row * (candidates / 8) + group
  const int64_t pages_per_row = candidates / kBlocksPerCta;
  const int64_t row = page / pages_per_row, group = page % pages_per_row;
  __shared__ int64_t src[kBlocksPerCta];  // byte offset of the block's page, -1 when invalid
  __shared__ int32_t off[kBlocksPerCta];  // token offset of the block inside its page
  if (threadIdx.x < kBlocksPerCta) {
    const int32_t slot_block = physical[row * candidates + group * kBlocksPerCta + threadIdx.x];
    const int64_t src_page = slot_block >= 0 ? int64_t(slot_block) / (kGatherPageSize / kGatherBlockSize) : -1;
    const bool ok = slot_block >= 0 && src_page < num_pages;
    src[threadIdx.x] = ok ? src_page * kPageBytes : -1;
    off[threadIdx.x] = int32_t(slot_block % (kGatherPageSize / kGatherBlockSize)) * kGatherBlockSize;
  }
  __syncthreads();
  uint8_t* dst_page = out + page * kPageBytes;
  // Values: 8 blocks x 64 vectors = 512 vectors, two per thread.
  uint4 v[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int vec = threadIdx.x + i * kThreads, b = vec / kVecPerBlock, e = vec % kVecPerBlock;
    v[i] = make_uint4(0, 0, 0, 0);
    if (src[b] >= 0) {
      v[i] = *reinterpret_cast<const uint4*>(cache + src[b] + int64_t(off[b]) * kGatherHeadDim + e * 16);
    }
  }
  // Scales: 8 blocks x 2 vectors, threads 0..15.
  uint4 s = make_uint4(0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u);  // quiet NaN
  const int sb = threadIdx.x / kScaleVecPerBlock, se = threadIdx.x % kScaleVecPerBlock;
  const bool scale_thread = threadIdx.x < kBlocksPerCta * kScaleVecPerBlock;
  if (scale_thread && src[sb] >= 0) {
    s = *reinterpret_cast<const uint4*>(cache + src[sb] + kGatherPageSize * kGatherHeadDim +
                                        int64_t(off[sb]) * 4 + se * 16);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int vec = threadIdx.x + i * kThreads;
    *reinterpret_cast<uint4*>(dst_page + vec * 16) = v[i];
  }
  if (scale_thread) {
    *reinterpret_cast<uint4*>(dst_page + kGatherPageSize * kGatherHeadDim + sb * 32 + se * 16) = s;
  }
}

}  // namespace

void LaunchGatherCandidateBlocks(const uint8_t* cache, int64_t num_pages, const int32_t* physical,
                                 int64_t rows, int64_t candidates, uint8_t* out,
                                 cudaStream_t stream) {
  const int64_t pages = rows * (candidates / kBlocksPerCta);
  if (pages == 0) return;
  LaunchKernel(GatherCandidateBlocksKernel, dim3(unsigned(pages)), dim3(kThreads), 0, stream, 0,
               cache, num_pages, physical, candidates, out);
}

}  // namespace dsv41
