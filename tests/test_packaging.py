"""Packaging: one version source, a pure-Python py3-none-any wheel without the extension, the
license and the changelog shipped with it, the library alone in it (the benchmarks, their
report and the test inputs are the repository's, in benchmarks/), and the version, the
changelog's newest release and the `v<version>` tags in agreement."""

from __future__ import annotations

import importlib.util
import re
import shutil
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
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
# A release's heading in CHANGELOG.md: `## [0.2.0] - 2026-12-07`.
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def test_one_version_source():
    """pyproject.toml types no version: the build reads `dsv41_jax.__version__`."""
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    (entry,) = [e for e in PYPROJECT["tool"]["dynamic-metadata"] if e["field"] == "version"]
    assert entry["provider"] == "scikit_build_core.metadata.regex"
    assert entry["input"] == "dsv41_jax/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", dsv41_jax.__version__)


def test_changelog_and_license():
    assert "## [Unreleased]" in CHANGELOG
    assert f"## [{dsv41_jax.__version__}]" in CHANGELOG, "no CHANGELOG entry for this version"
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    head = (ROOT / "LICENSE").read_text().split()
    assert head[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in (ROOT / "LICENSE").read_text()


def test_newest_release_is_the_version():
    """Below `## [Unreleased]` the releases, newest first; the newest is `__version__`: a
    release sets both in its commit (the one tagged `v<version>`), and later changes go under
    Unreleased until the next."""
    releases = RELEASE.findall(CHANGELOG)
    headings = re.findall(r"^## .*$", CHANGELOG, re.MULTILINE)
    assert headings == ["## [Unreleased]"] + [f"## [{v}] - {d}" for v, d in releases]
    versions = [tuple(int(n) for n in v.split(".")) for v, _ in releases]
    assert versions == sorted(set(versions), reverse=True), "versions not newest first"
    dates = [d for _, d in releases]
    assert dates == sorted(dates, reverse=True), "dates not newest first"
    assert releases[0][0] == dsv41_jax.__version__, (
        f"CHANGELOG's newest release is {releases[0][0]}, __version__ is {dsv41_jax.__version__}"
    )


def test_docs_say_how_releases_are_tagged():
    """The changelog, the README and docs/install.md say each release is tagged `v<version>`;
    install.md's "Versions" names the current version in its examples."""
    for doc in ("CHANGELOG.md", "README.md", "docs/install.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert "tagged `v<version>`" in text, doc
    install = (ROOT / "docs" / "install.md").read_text()
    versions = install[install.index("## Versions") :].split("\n## ")[0]
    named = re.findall(r"`git checkout v(\S+)`|`dsv41_jax (\S+)`", versions)
    assert len(named) == 2 and {a or b for a, b in named} == {dsv41_jax.__version__}, named


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_version_tags_agree_with_the_changelog():
    """Each `v<version>` tag of this clone marks a commit whose `__version__` is that version,
    and names a release of the changelog; a tag on HEAD names `__version__`. A clone without
    tags passes (a CI clone may not fetch them)."""
    released = {f"v{v}" for v, _ in RELEASE.findall(CHANGELOG)}
    for tag in _git("tag", "--list", "v*").split():
        assert tag in released, f"tag {tag}: no such release in CHANGELOG.md"
        init = _git("show", f"{tag}:dsv41_jax/__init__.py")
        assert f'__version__ = "{tag[1:]}"' in init, f"tag {tag}: another __version__ there"
    for tag in _git("tag", "--points-at", "HEAD", "--list", "v*").split():
        assert tag == f"v{dsv41_jax.__version__}", f"HEAD is tagged {tag}"


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
