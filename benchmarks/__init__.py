"""Device-time benchmarks: `python -m benchmarks [ops] [--quick] [--out FILE]`.

A package of the repository, not of the installed library (`pip install .` installs only
`dsv41_jax`): it runs from a checkout, with the repository root as the current directory or on
PYTHONPATH.

Runs on a GPU machine. Time is GPU kernel time read from CUPTI (through torch.profiler, which
records every kernel of the process, JAX's included): the time at least one kernel ran inside
the timed window (the sum of their durations where none overlap; kernels that overlap, a
dependent launch beside the kernel before it, count once) divided by the calls in it, median of
repeats. Host dispatch is never timed. Inputs
rotate over several sets so repeated calls do not hit a warm cache. Every row stands beside its
floor: the bytes it must move over the copy bandwidth measured in the same run. The selection
rows are checked before they are timed: top-k, masked top-k and candidate selection (each
implementation and each CUDA select forced) against the reference, a consumer layer's and the
step's variants against the mask path's selections; a row whose result differs raises
WrongResult and is never timed.

A run's table (`--out`) goes into BENCHMARKS_HISTORY.md as a new section, and BENCHMARKS.md is
generated from that file (`python -m benchmarks.report`).

Modules: `args` (the command line), `cli` (`main`: the run and its table), `timing` (CUPTI
kernel time, the result checks, the copy bandwidth, the host wall and GPU span of back-to-back
calls), `table` (`Row`, the markdown table, saved runs), `plots`, and one module per benchmark
family: `logits`, `blocks` (sort, amax), `topk`, `select`, `step`, `model`, `prefill`,
`sharded`. Beside the bench: `inputs` (the ops' random inputs, shared with the test suite and
the probes) and `report` (BENCHMARKS.md from BENCHMARKS_HISTORY.md: `python -m
benchmarks.report [--check]`).
"""
