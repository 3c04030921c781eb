"""Type checking, where mypy is installed (the `test` extra installs it): the package and the
repository's benchmarks pass `mypy -p dsv41_jax -p benchmarks` with the configuration in
pyproject.toml ([tool.mypy]), and the python blocks of the README and docs/*.md type-check as a
user's code: the same strict settings, but unannotated functions allowed (their bodies are still
checked). One mypy run checks all three."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import BLOCK, DOCS

ROOT = Path(__file__).parents[1]
# A user's snippets define helpers without annotations (`def layer(seed):`).
RELAXED = "# mypy: allow-untyped-defs, allow-incomplete-defs\n"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (pip install mypy, or the `test` extra)",
)


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    folder = tmp_path_factory.mktemp("doc_examples")
    files = []
    for doc in DOCS:
        blocks = BLOCK.findall(doc.read_text())
        if blocks:  # one module per document: its blocks share a namespace when they run
            files.append(folder / f"{doc.stem.lower()}_examples.py")
            files[-1].write_text(RELAXED + "\n".join(blocks))
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout's dsv41_jax, not an installed one
    done = subprocess.run(
        # `dsv41_jax` and `benchmarks` as folders: the modules of `mypy -p dsv41_jax -p
        # benchmarks` (which takes no files too)
        [sys.executable, "-m", "mypy", "dsv41_jax", "benchmarks", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    return done, files


def errors(done: subprocess.CompletedProcess[str], prefix: str) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(prefix)]


def test_package_passes_mypy_with_its_config(mypy_run):
    done, _ = mypy_run
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]  # 2: a crash
    assert not errors(done, "dsv41_jax"), "\n".join(errors(done, "dsv41_jax"))


def test_benchmarks_pass_mypy_with_the_config(mypy_run):
    done, _ = mypy_run
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    assert not errors(done, "benchmarks"), "\n".join(errors(done, "benchmarks"))


def test_doc_examples_type_check(mypy_run):
    done, files = mypy_run
    assert any(f.name == "readme_examples.py" for f in files)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    bad = errors(done, str(files[0].parent))
    assert not bad, "\n".join(bad)
    assert done.returncode == 0, done.stdout[-4000:]
