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
    emu::Arrive(c->block_gen, c->block_count, c->n,
                [c] { c->cluster->os_barrier.arrive_and_wait(); });
  }
  template <class T>
  T* map_shared_rank(T* p, int rank) const {
    emu::Cta* c = emu::tl_cta;
    char* mine = &emu::tl_anchor;
    return reinterpret_cast<T*>(reinterpret_cast<char*>(p) - mine + c->cluster->anchors[rank]);
  }
};

inline cluster_group this_cluster() { return {}; }

}  // namespace cooperative_groups
