// The cluster part of cooperative groups, for the CPU stand-in (see cuda_runtime.h).
#pragma once

#include "cuda_runtime.h"

namespace cooperative_groups {

struct cluster_group {
  unsigned num_blocks() const { return unsigned(emu::tl_cta->cluster->size); }
  unsigned block_rank() const { return unsigned(emu::tl_cta->rank); }
  // Every thread of every CTA of the cluster arrives; shared memory written before is visible
  // to all of them after (the OS barrier orders the CTAs' threads).
  void sync() const {
    emu::Cta* c = emu::tl_cta;
    emu::Arrive(c->block_gen, c->block_count, c->n, [c] {
      c->cluster->os_barrier.ArriveAndWait();
      ++c->cluster_syncs;
    });
  }
  // The address is taken to be read or written right away: the harness checks that CTA `rank`
  // passes another cluster.sync before it exits (cuda_runtime.h, Cluster::read_at).
  template <class T>
  T* map_shared_rank(T* p, int rank) const {
    emu::Cta* c = emu::tl_cta;
    if (rank < 0 || rank >= c->cluster->size) {
      std::fprintf(stderr, "emu: map_shared_rank to rank %d in a cluster of %d\n", rank,
                   c->cluster->size);
      std::abort();
    }
    if (rank != c->rank) {
      long& at = c->cluster->read_at[c->rank][rank];
      at = at > c->cluster_syncs ? at : c->cluster_syncs;
    }
    char* mine = &emu::tl_anchor;
    return reinterpret_cast<T*>(reinterpret_cast<char*>(p) - mine + c->cluster->anchors[rank]);
  }
};

inline cluster_group this_cluster() { return {}; }

}  // namespace cooperative_groups
