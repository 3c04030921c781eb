"""The examples run: the quickstart notebook's code cells execute in order (reference on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_quickstart_notebook_runs():
    nb = json.loads((EXAMPLES / "quickstart.ipynb").read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert cells
    namespace: dict = {}
    for cell in cells:
        source = "".join(cell["source"])
        exec(compile(source, "quickstart.ipynb", "exec"), namespace)
    assert "selected" in namespace
