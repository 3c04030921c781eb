// How many clusters of c CTAs (1-16) of the one-kernel sparse select (ffi/sm90_sparse_select.cu:
// one CTA an SM, its largest shared memory) run at once on this GPU, as the occupancy calculator
// tells the extension when it prepares the device, and the cluster a row it then picks for
// 1-16 rows of C = 2048 blocks. Build and run: scripts/device_check.sh
// ffiprobe:scripts/probes/onchip_max_clusters.cu.
#include <cstdio>

#include "sm90_sparse_select.cu"

using namespace dsv41;

int main() {
  if (PrepareSparseSelectSm90() != cudaSuccess) return 1;
  std::printf("TIME sms %d, clusters of c at once:", g_num_sms.Current());
  for (int c = 1; c <= onchip::kMaxCluster; ++c) {
    std::printf(" %d:%d", c, g_max_clusters[c].Current());
  }
  std::printf("\n");
  for (int rows : {1, 2, 4, 8, 16}) {
    std::printf("TIME rows %d -> clusters of %d\n", rows, SparseSelectClusterSize(rows, 2048));
  }
  return 0;
}
