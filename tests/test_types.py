"""Type checking, where mypy is installed (the `test` extra installs it): the package passes
`mypy -p dsv41_jax` with the configuration in pyproject.toml ([tool.mypy]), and the python
blocks of the README and docs/*.md type-check as a user's code (mypy's defaults, with the bodies
of unannotated functions checked too)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import BLOCK, DOCS

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (pip install mypy, or the `test` extra)",
)


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout's dsv41_jax, not an installed one
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )


def test_package_passes_mypy_with_its_config():
    done = mypy("-p", "dsv41_jax")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_doc_examples_type_check(tmp_path):
    files = []
    for doc in DOCS:
        blocks = BLOCK.findall(doc.read_text())
        if blocks:  # one module per document: its blocks share a namespace when they run
            files.append(tmp_path / f"{doc.stem.lower()}_examples.py")
            files[-1].write_text("\n".join(blocks))
    assert any(f.name == "readme_examples.py" for f in files)
    done = mypy(
        "--config-file=",  # a user's defaults, not the package's strict settings
        "--python-version=3.12",
        "--check-untyped-defs",
        f"--cache-dir={ROOT / '.mypy_cache' / 'docs'}",
        *map(str, files),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
