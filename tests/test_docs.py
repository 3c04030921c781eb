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


def test_every_doc_with_python_is_covered():
    assert any(BLOCK.search(p.read_text()) for p in DOCS)


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
