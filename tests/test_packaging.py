"""Packaging: one version source, a pure-Python py3-none-any wheel without the extension, the
license and the changelog shipped with it, and the library alone in it (the benchmarks, their
report and the test inputs are the repository's, in benchmarks/)."""

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
# Modules the package once held that are not the library: the bench (`python -m
# benchmarks`), the BENCHMARKS.md generator (`python -m benchmarks.report`) and the ops' random
# inputs (`benchmarks.inputs`).
NOT_LIBRARY = ("dsv41_jax.bench", "dsv41_jax.bench_report", "dsv41_jax.testing")


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
    assert all(n.startswith(("dsv41_jax/", f"dsv41_jax-{dsv41_jax.__version__}")) for n in names)
    for module in NOT_LIBRARY:  # neither a module nor a package of that name
        path = module.replace(".", "/")
        assert not [n for n in names if n == f"{path}.py" or n.startswith(f"{path}/")], module
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    info = f"dsv41_jax-{dsv41_jax.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_the_package_holds_the_library_only():
    """The bench, its report and the test inputs live in benchmarks/ of the repository: the
    package folder the wheel installs (`wheel.packages`) has none of them."""
    assert PYPROJECT["tool"]["scikit-build"]["wheel"]["packages"] == ["dsv41_jax"]
    for module in NOT_LIBRARY:
        assert importlib.util.find_spec(module) is None, module
    for name in ("bench", "bench_report.py", "testing.py"):
        assert not (ROOT / "dsv41_jax" / name).exists(), name
    for module in ("benchmarks.__main__", "benchmarks.report", "benchmarks.inputs"):
        assert importlib.util.find_spec(module) is not None, module


def test_install_doc_describes_the_test_extra():
    """docs/install.md's "Extras:" names every package of the `test` extra."""
    doc = " ".join((ROOT / "docs" / "install.md").read_text().split())
    extras = doc[doc.index("Extras: `test`") :].split("`bench`")[0]
    for req in PYPROJECT["project"]["optional-dependencies"]["test"]:
        assert re.split(r"[=<>\[]", req)[0] in extras, req
