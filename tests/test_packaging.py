"""Packaging: one version source, a pure-Python py3-none-any wheel without the extension, the
license and the changelog shipped with it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import dsv41_jax

ROOT = Path(__file__).parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_source():
    """pyproject.toml types no version: the build reads `dsv41_jax.__version__`."""
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    (entry,) = [e for e in PYPROJECT["tool"]["dynamic-metadata"] if e["field"] == "version"]
    assert entry["provider"] == "scikit_build_core.metadata.regex"
    assert entry["input"] == "dsv41_jax/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", dsv41_jax.__version__)


def test_changelog_and_license():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert f"## [{dsv41_jax.__version__}]" in changelog, "no CHANGELOG entry for this version"
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    head = (ROOT / "LICENSE").read_text().split()
    assert head[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in (ROOT / "LICENSE").read_text()


@pytest.mark.skipif(
    importlib.util.find_spec("scikit_build_core") is None,
    reason="needs scikit-build-core (the build backend; `make install` installs it)",
)
def test_pure_python_wheel_without_the_extension(tmp_path):
    """`-C dsv41.cuda=false` builds without CMake (seconds) a wheel any Python 3 can take."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps"]
        + ["-C", "dsv41.cuda=false", "-C", f"build-dir={tmp_path / 'build'}", str(ROOT)]
        + ["-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name == f"dsv41_jax-{dsv41_jax.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "dsv41_jax/py.typed" in names and "dsv41_jax/__init__.py" in names
    assert "dsv41_jax/bench/__main__.py" in names  # python -m dsv41_jax.bench
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    info = f"dsv41_jax-{dsv41_jax.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_install_doc_describes_the_test_extra():
    """docs/install.md's "Extras:" names every package of the `test` extra."""
    doc = " ".join((ROOT / "docs" / "install.md").read_text().split())
    extras = doc[doc.index("Extras: `test`") :].split("`bench`")[0]
    for req in PYPROJECT["project"]["optional-dependencies"]["test"]:
        assert re.split(r"[=<>\[]", req)[0] in extras, req
