"""The package's modules import one another in one direction: no import circle, counting every
import statement (inside functions and under TYPE_CHECKING too: an import moved into a function
still breaks the layering) and the package `__init__` files an import runs first."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "dsv41_jax"


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of `package` (a folder) -> the modules of it that its imports run: the one
    each import names, and the packages above that one which the importer is not inside (their
    `__init__` runs first; the importer's own are running already)."""
    paths = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from a import b`: module a.b where there is one, else a name of a
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                    for a in node.names
                ]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                above = (".".join(parts[:i]) for i in range(1, len(parts)))
                ran = [p for p in above if name != p and not name.startswith(p + ".")]
                graph[name] |= {m for m in (*ran, target) if m in paths and m != name}
    return graph


def circle(package: Path) -> list[str] | None:
    """One import circle of `package` (module, ..., the same module), or None."""
    try:
        graphlib.TopologicalSorter(import_graph(package)).prepare()
    except graphlib.CycleError as e:
        return list(e.args[1])
    return None


def test_the_package_has_no_import_circle():
    found = circle(PACKAGE)
    assert found is None, f"an import circle: {' -> '.join(found or [])}"


@pytest.mark.parametrize(
    "files",
    [
        # a circle hidden by a function-level import
        {"a.py": "from pkg import b\n", "b.py": "def f():\n    from pkg import a\n"},
        # a circle through a package __init__ (importing pkg.sub.low runs pkg/sub/__init__.py)
        {
            "sub/__init__.py": "from pkg.sub import api\n",
            "sub/api.py": "from pkg import plan\n",
            "sub/low.py": "",
            "plan.py": "from pkg.sub import low\n",
        },
    ],
)
def test_the_check_finds_a_circle(tmp_path, files):
    for name, text in {"__init__.py": "", **files}.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    assert circle(tmp_path / "pkg") is not None
