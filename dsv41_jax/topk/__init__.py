"""Selection: masked top-k, the top-C candidate blocks, and the position transforms.

The public ops are in `api` (`dsv41_jax` exports them). This file imports none of the modules:
the plan (`dsv41_jax.plan`) imports the implementations (`ffi`, `pallas_mgpu`, `mgpu_select`),
and `api`, which reads the plan, sits above it."""
