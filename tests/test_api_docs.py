"""docs/api.md, the API reference, is generated from the docstrings (scripts/gen_api_docs.py)
and current; it lists every public name; the modules say what is public (`__all__`)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_api_docs  # noqa: E402


def test_api_page_is_current():
    text = gen_api_docs.render(gen_api_docs.load())
    assert (ROOT / "docs" / "api.md").read_text() == text, (
        "docs/api.md is stale: run python scripts/gen_api_docs.py"
    )


def test_api_page_lists_every_public_name():
    doc = (ROOT / "docs" / "api.md").read_text()
    headings = set(re.findall(r"^### `([\w.]+)`", doc, flags=re.MULTILINE))
    for modname, mod in gen_api_docs.load().items():
        prefix = "" if modname == "dsv41_jax" else modname.removeprefix("dsv41_jax.") + "."
        assert mod.__all__ and {prefix + n for n in mod.__all__} <= headings, modname
        for name in mod.__all__:
            assert hasattr(mod, name), f"{modname}.__all__ names {name}, which is missing"


def test_every_public_function_of_sharding_and_info_is_in_all():
    """A new public function of either (of sharding's layout modules) must be added to its
    `__all__` (and so to the reference page); `info.main` is the CLI, documented in
    docs/dispatch.md, and info's `__all__` also names what it re-exports from the extension
    module."""
    from dsv41_jax import info, sharding
    from dsv41_jax.sharding import dcp, pcp, rows

    def public(mod) -> set[str]:
        return {
            name
            for name, obj in vars(mod).items()
            if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == mod.__name__
        }

    assert public(rows) | public(dcp) | public(pcp) == set(sharding.__all__)
    # info also re-exports the extension's simulated-device names (defined in dsv41_jax._ext).
    from dsv41_jax import _ext

    exported = {"DeviceFacts", "H200", "simulated_device"}
    assert all(getattr(info, n) is getattr(_ext, n) for n in exported)
    assert public(info) - {"main"} == set(info.__all__) - exported


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_api_docs, "OUT", tmp_path / "api.md")
    monkeypatch.setattr(gen_api_docs, "ROOT", tmp_path)
    (tmp_path / "api.md").write_text("# stale\n")
    assert gen_api_docs.main(["--check"]) == 1
    assert gen_api_docs.main([]) == 0 and gen_api_docs.main(["--check"]) == 0


def test_submodules_are_attributes_after_import_dsv41_jax():
    """docs: `dsv41_jax.info.explain(...)` and `dsv41_jax.sharding...` after `import dsv41_jax`
    alone (a fresh process: this one has imported them already)."""
    code = "import dsv41_jax; print(dsv41_jax.info.explain.__name__, dsv41_jax.sharding.__name__)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["explain", "dsv41_jax.sharding"]
