"""Where each implementation has been verified: one record per implementation, which the
dispatch, `dsv41_jax.info`, docs/status.md, the README's status lines and the inline statuses
of the README and docs (`scripts/gen_status_doc.py`) read, so that no decision or claim is
keyed on prose.

A status is one of
- "device": it ran on `devices` and matched the reference there (the project's GPU tests);
- "compiled": built for its architecture in CI, never run in this project (no such machine);
- "host": run on CPU host devices only (its GPU kernels not yet in this arrangement).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

Level = Literal["device", "compiled", "host"]

# The jax releases the GPU test suite has passed on: the "device" statuses below hold for these.
# The CPU suite passes on every release pyproject.toml allows (0.11.2 and 0.12.1).
GPU_VERIFIED_JAX = ("0.11.2",)


def jax_gpu_verified(version: str) -> bool:
    """Whether the GPU test suite has passed on jax `version` (e.g. `jax.__version__`)."""
    return version in GPU_VERIFIED_JAX


@dataclasses.dataclass(frozen=True)
class Status:
    """How far one implementation has been verified; `covers` says what it is."""

    level: Level
    covers: str
    devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.level not in ("device", "compiled", "host"):
            raise ValueError(f"level must be 'device', 'compiled' or 'host', got {self.level!r}")
        if (self.level == "device") != bool(self.devices):
            raise ValueError("a device-verified status names its devices; no other does")

    @property
    def device_verified(self) -> bool:
        return self.level == "device"

    def __str__(self) -> str:
        if self.level == "device":
            return "verified on " + ", ".join(self.devices)
        return "compile-verified only" if self.level == "compiled" else "run on host devices only"


_H200 = ("H200",)
STATUS: dict[str, Status] = {
    "sm90 paged logits": Status(
        "device",
        "DeepGEMM's FP8 paged MQA logits (decode), through `dsv41_sm90_paged_mqa_logits`",
        _H200,
    ),
    "sm90 sparse logits": Status(
        "device", 'the project\'s FP8 logits over the candidate blocks (`path="sparse"`)', _H200
    ),
    "sm90 prefill logits": Status("device", "DeepGEMM's FP8 ragged MQA logits (prefill)", _H200),
    "sm90 fused layers": Status(
        "device", "the step's publish and select layers as one custom call each", _H200
    ),
    "cuda selects": Status(
        "device", "the short-row, filter-first, cluster and on-chip exact top-k selects", _H200
    ),
    "pallas kernels": Status(
        "device", "the Pallas Mosaic GPU block maxima, top-k and candidate selection", _H200
    ),
    "sm100 paged logits": Status("compiled", "DeepGEMM's MXFP4 paged MQA logits (decode)"),
    "sm100 sparse logits": Status("compiled", "DeepGEMM's MXFP4 paged sparse MQA logits"),
    "sm100 prefill logits": Status("compiled", "DeepGEMM's MXFP4 ragged MQA logits (prefill)"),
    "dcp sparse path": Status(
        "host", '`dcp_select(path="sparse")`: local candidate tables under decode context parallel'
    ),
    "command buffers": Status(
        "device",
        "the jitted decode step captured as CUDA graphs at XLA's default flags, results as without",
        _H200,
    ),
}


def of(name: str) -> Status:
    """The status of implementation `name` (a key of STATUS)."""
    try:
        return STATUS[name]
    except KeyError:
        raise KeyError(f"no status for {name!r}; known: {sorted(STATUS)}") from None


def markdown() -> str:
    """docs/status.md: every implementation's status, as STATUS holds it."""
    lines = [
        "# What has been verified where",
        "",
        "Generated from `dsv41_jax/status.py` (`python scripts/gen_status_doc.py`); the dispatch",
        'reads the same records (e.g. `dcp_select(path="auto")` takes the sparse path only once',
        "it is device-verified) and `python -m dsv41_jax info` prints them. A kernel counts as",
        "verified on a device once it has run there and matched the reference; compile-verified",
        "kernels are built for their architecture in CI and have never run in this project.",
        f"The device statuses hold on jax {', '.join(GPU_VERIFIED_JAX)} (`GPU_VERIFIED_JAX`: the",
        "releases the GPU test suite has passed on); on any other jax, the first op on a GPU",
        "backend logs a warning, once per process.",
        "",
        "| implementation | status | what it is |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {s} | {s.covers} |" for name, s in STATUS.items()]
    return "\n".join(lines) + "\n"


# The README's status lines stand between these two lines (`scripts/gen_status_doc.py`).
SUMMARY_BEGIN = "<!-- status: generated from dsv41_jax/status.py by scripts/gen_status_doc.py -->"
SUMMARY_END = "<!-- /status -->"


def summary() -> str:
    """The README's status lines: the implementations at each status, as STATUS holds them,
    and the jax releases the device statuses hold on (GPU_VERIFIED_JAX)."""
    names: dict[str, list[str]] = {}
    for name, s in STATUS.items():
        names.setdefault(str(s), []).append(name)
    jax = f"- the device statuses hold on jax {', '.join(GPU_VERIFIED_JAX)} (`docs/install.md`)\n"
    return "".join(f"- {level}: {', '.join(n)}\n" for level, n in names.items()) + jax


def with_summary(text: str) -> str:
    """`text` (the README) with the lines between SUMMARY_BEGIN and SUMMARY_END replaced by
    `summary()`; ValueError if it lacks either."""
    head, begin, rest = text.partition(SUMMARY_BEGIN + "\n")
    _, end, tail = rest.partition(SUMMARY_END)
    if not begin or not end:
        raise ValueError(f"no {SUMMARY_BEGIN!r} ... {SUMMARY_END!r} lines")
    return head + begin + summary() + end + tail


# An inline status in the README or a docs page: `<!-- status of "NAME" -->TEXT<!-- /status -->`
# on one line, TEXT written as `str(of(NAME))` (`scripts/gen_status_doc.py`), so a table cell or
# sentence states what the record says.
INLINE = re.compile(r'(<!-- status of "(?P<name>[^"]+)" -->)(?P<text>[^\n]*?)(<!-- /status -->)')


def with_inline(text: str) -> str:
    """`text` with each inline status written from its record; KeyError for an unknown name."""
    return INLINE.sub(lambda m: m[1] + str(of(m["name"])) + m[4], text)


def without_generated(text: str) -> str:
    """`text` less its generated status text (the inline statuses' and the README's lines)."""
    return INLINE.sub(lambda m: m[1] + m[4], text).replace(summary(), "")
