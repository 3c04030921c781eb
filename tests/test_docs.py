"""The documentation runs: every ```python block of README.md and docs/*.md executes as written
(the blocks of one file in order, sharing a namespace), on CPU. A block whose first line starts
with "# GPU only" is compiled, and run only on a GPU machine."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


# Any fence that opens Python code, however written (indented, "py", a space, attributes).
PYTHON_FENCE = re.compile(r"^[ \t>]*```[ \t]*(?:python|py|python3)\b", re.MULTILINE)


def test_every_python_block_is_one_the_runner_executes():
    """A Python block the runner's pattern misses (indented in a list, fenced ```py) would never
    run: each document's Python fences are exactly the blocks that `BLOCK` finds, and some
    document has them."""
    counts = {p.name: len(BLOCK.findall(p.read_text())) for p in DOCS}
    fences = {p.name: len(PYTHON_FENCE.findall(p.read_text())) for p in DOCS}
    assert fences == counts
    assert sum(counts.values()) > 0


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_python_blocks_run_as_written(doc):
    blocks = BLOCK.findall(doc.read_text())
    if not blocks:
        pytest.skip("no python blocks")
    namespace: dict = {"__name__": "__doc_test__"}
    on_gpu = jax.default_backend() == "gpu"
    for i, source in enumerate(blocks):
        code = compile(source, f"{doc.name}[block {i}]", "exec")
        if source.startswith("# GPU only") and not on_gpu:
            continue
        exec(code, namespace)
