"""The examples run: the quickstart notebook's code cells execute in order (reference on CPU),
and its stored outputs come from the current code (scripts/run_notebook.py stores them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_quickstart_notebook_runs_under_a_real_kernel():
    """The notebook executes headless in a real Jupyter kernel (ipykernel through nbclient, as a
    reader's Jupyter runs it): no cell fails and both figures show, from the kernel's inline
    backend; the notebook as stored carries them too (scripts/run_notebook.py --in-place)."""
    import sys

    sys.path.insert(0, str(EXAMPLES.parent / "scripts"))
    from run_notebook import execute

    nb = execute(EXAMPLES / "quickstart.ipynb")
    plots = [c for c in nb.cells if c.cell_type == "code" and "plt.show()" in c.source]
    assert len(plots) == 2
    for c in plots:
        assert any("image/png" in o.get("data", {}) for o in c.outputs), c.source[:80]
    assert not any("matplotlib.use(" in c.source for c in nb.cells if c.cell_type == "code")
    stored = json.loads((EXAMPLES / "quickstart.ipynb").read_text())
    for c in stored["cells"]:
        if c["cell_type"] == "code" and "plt.show()" in "".join(c["source"]):
            assert any("image/png" in o.get("data", {}) for o in c["outputs"])


def test_run_notebook_default_output_is_ignored_by_git():
    """docs/install.md: `python scripts/run_notebook.py` leaves its executed copy untracked and
    ignored."""
    root = EXAMPLES.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    sys.path.insert(0, str(root / "scripts"))
    from run_notebook import default_output

    out = default_output(Path("examples/quickstart.ipynb"))
    assert out == Path("examples/quickstart.executed.ipynb")
    done = subprocess.run(["git", "check-ignore", "-q", str(out)], cwd=root)
    assert done.returncode == 0, f"{out} is not ignored by .gitignore"


def test_demo_says_which_implementation_each_op_takes():
    """`make demo` (examples/decode_step.py) names, before it runs, the implementation each op
    of its step takes here and why a faster one was declined: on this CPU backend the reference,
    the FFI declined for want of a CUDA GPU backend, whether or not the extension is built."""
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("checks the CPU backend's choices")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "decode_step.py"), "--batch", "2"]
        + ["--min-context", "300", "--max-context", "17000"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("CUDA extension: "))
    taken = dict(line.strip().split(": ", 1) for line in lines[start + 1 : start + 4])
    assert set(taken) >= {"publish", "paged_mqa_logits", "topk"}
    assert taken["paged_mqa_logits"].startswith("reference (")
    assert "needs a CUDA GPU backend" in taken["paged_mqa_logits"]
    assert (
        lines.index("[2/4] compiling and running the step: publish (layer 20) + 4 selects ...")
        > start
    )
