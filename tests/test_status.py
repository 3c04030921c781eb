"""dsv41_jax.status: one record per implementation, docs/status.md and the README's status
lines generated from it (scripts/gen_status_doc.py), and no status claim in the docs or
docstrings that the records contradict."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

from dsv41_jax import status

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_status_doc  # noqa: E402


def test_docs_status_md_is_current():
    assert (ROOT / "docs" / "status.md").read_text() == status.markdown(), (
        "docs/status.md is stale: run python scripts/gen_status_doc.py"
    )


def test_readme_status_lines_are_current():
    readme = (ROOT / "README.md").read_text()
    assert readme == status.with_summary(readme), (
        "README.md's status lines are stale: run python scripts/gen_status_doc.py"
    )
    assert "- compile-verified only: sm100 paged logits," in readme


def test_check_fails_on_a_stale_file_and_passes_once_written(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_status_doc, "OUT", tmp_path / "status.md")
    monkeypatch.setattr(gen_status_doc, "README", tmp_path / "README.md")
    (tmp_path / "status.md").write_text(status.markdown())
    (tmp_path / "README.md").write_text(
        f"# x\n\n{status.SUMMARY_BEGIN}\n- typed\n{status.SUMMARY_END}\n\nmore\n"
    )
    assert gen_status_doc.main(["--check"]) == 1
    assert gen_status_doc.main([]) == 0 and gen_status_doc.main(["--check"]) == 0
    assert (tmp_path / "README.md").read_text() == (
        f"# x\n\n{status.SUMMARY_BEGIN}\n{status.summary()}{status.SUMMARY_END}\n\nmore\n"
    )
    (tmp_path / "status.md").write_text("# stale\n")
    assert gen_status_doc.main(["--check"]) == 1
    with pytest.raises(ValueError, match="status"):
        status.with_summary("no markers\n")


def test_a_status_names_devices_exactly_when_device_verified():
    assert str(status.Status("device", "x", ("H200",))) == "verified on H200"
    assert str(status.Status("compiled", "x")) == "compile-verified only"
    assert not status.Status("host", "x").device_verified
    for bad in (("device", "x", ()), ("compiled", "x", ("H200",)), ("tested", "x", ())):
        with pytest.raises(ValueError):
            status.Status(*bad)
    with pytest.raises(KeyError, match="known"):
        status.of("no such kernel")


def _texts():
    """The README (without its generated status lines), docs and the package's sources."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "dsv41_jax").rglob("*.py")]
    texts = [(f, f.read_text()) for f in files if f.name not in ("status.md", "status.py")]
    return [(f, text.replace(status.summary(), "")) for f, text in texts]


def test_compile_verified_claims_name_only_compile_verified_architectures():
    """Every line of the README, docs and docstrings saying "compile-verified" names SM100 (or
    Blackwell), and every SM100 record is compile-verified: once a Blackwell kernel runs and
    its record changes, the claims left in prose fail here."""
    compiled = {n for n, s in status.STATUS.items() if s.level == "compiled"}
    assert compiled and all(n.startswith("sm100 ") for n in compiled)
    assert all(s.level == "compiled" for n, s in status.STATUS.items() if n.startswith("sm100 "))
    for f, text in _texts():
        for i, line in enumerate(text.splitlines()):
            if re.search("compile-verified", line, re.IGNORECASE):
                window = " ".join(text.splitlines()[max(i - 2, 0) : i + 1])
                assert re.search(r"SM100|sm_100|Blackwell", window), f"{f.name}:{i + 1}: {line}"


def test_the_dcp_sparse_claims_follow_its_record():
    """The DCP docs say what dcp_select's "auto" does by reading the record, not by a claim."""
    text = (ROOT / "docs" / "multi_device.md").read_text()
    assert '"dcp sparse path"' in text and "host devices only so far" not in text
