"""How many clusters of the short-row select's CTAs the GPU runs at once, per cluster size (the
CUDA occupancy calculator through the extension): the dispatch sends a call to the short-row
select only when every row's cluster runs at once."""

import jax

from dsv41_jax import _ext

_ext.register_ffi_targets()
sizes = {c: _ext.short_topk_max_clusters(c) for c in range(1, 9)}
print(f"OK {jax.devices()[0].device_kind}: clusters at once by cluster size {sizes}")
