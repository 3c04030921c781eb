"""Every dispatch decision, with its reason, resolved at trace time from shapes, the caller's
arguments and a device record read once (`device_record`):

- `ops`: the selection ops' plan (`plan(...)` -> `Plan`): which implementation `topk` and
  `select_candidate_blocks` try first, and which CUDA select their `ffi` implementation and the
  fused layers run.
- `OpPlan` (`dsv41_jax._dispatch`): the plan of the other ops (the logits ops, block scores,
  the candidate table, the page transform): which implementation runs, by each one's
  `supports`, and which kernel family (SM90 or SM100) it takes.
- `layers`: the indexer layers' and the decode step's plans (`plan_layer` -> `LayerPlan`,
  `plan_step` -> `StepPlan`, `TwoLevelIndexer.plan`): each consumer's path, the source's
  every-block table, one custom call a layer or a step, and each fused layer's CUDA selects
  (`Decision`s).
- `sharded`: row sharding's split and DCP's consumer path and exchange, each a `Decision`.

Plans are frozen, hashable values: they can be printed, compared and passed as static
arguments. The plan sits above the implementations: it imports them and reads what they can
run (their `supports` and `declines`); they import nothing from it and run what the plan says.
The records both read (`dsv41_jax._device`, `dsv41_jax.topk.spec`) are below both, and their
names are re-exported here.
"""

from dsv41_jax._device import Device, device_record, ffi_declines, no_cuda_select
from dsv41_jax._dispatch import OpPlan
from dsv41_jax.plan.layers import Decision, LayerPlan, LayerSpec, StepPlan, plan_layer, plan_step
from dsv41_jax.plan.ops import (
    IMPLEMENTATIONS,
    ONCHIP,
    SELECTS,
    Plan,
    check_algorithm,
    cuda_select,
    plan,
    resolve,
    select_declines,
    sparse_select,
)
from dsv41_jax.topk.ffi import SPLIT_MAX_ROWS, short_max_n, split_rows
from dsv41_jax.topk.spec import OPS, Op, Spec

__all__ = [
    "IMPLEMENTATIONS",
    "ONCHIP",
    "OPS",
    "SELECTS",
    "SPLIT_MAX_ROWS",
    "Decision",
    "Device",
    "LayerPlan",
    "LayerSpec",
    "Op",
    "OpPlan",
    "Plan",
    "Spec",
    "StepPlan",
    "check_algorithm",
    "cuda_select",
    "device_record",
    "ffi_declines",
    "no_cuda_select",
    "plan",
    "plan_layer",
    "plan_step",
    "resolve",
    "select_declines",
    "short_max_n",
    "sparse_select",
    "split_rows",
]
