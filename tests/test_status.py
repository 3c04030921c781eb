"""dsv41_jax.status: one record per implementation, docs/status.md, the README's status lines
and the inline statuses of the README and docs generated from it (scripts/gen_status_doc.py),
and no status typed anywhere else in the docs, docstrings or kernel sources."""

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


def _inline(name: str, text: str) -> str:
    return f'<!-- status of "{name}" -->{text}<!-- /status -->'


def test_check_fails_on_a_stale_file_and_passes_once_written(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(gen_status_doc, "OUT", docs / "status.md")
    monkeypatch.setattr(gen_status_doc, "README", tmp_path / "README.md")
    monkeypatch.setattr(gen_status_doc, "DOCS", docs)
    (docs / "status.md").write_text(status.markdown())
    (tmp_path / "README.md").write_text(
        f"# x\n\n{status.SUMMARY_BEGIN}\n- typed\n{status.SUMMARY_END}\n\nmore\n"
    )
    for stale in ("README", "docs"):
        if stale == "docs":
            (docs / "page.md").write_text(f"| a | {_inline('sm100 paged logits', 'typed')} |\n")
        assert gen_status_doc.main(["--check"]) == 1
        assert gen_status_doc.main([]) == 0 and gen_status_doc.main(["--check"]) == 0
    assert (tmp_path / "README.md").read_text() == (
        f"# x\n\n{status.SUMMARY_BEGIN}\n{status.summary()}{status.SUMMARY_END}\n\nmore\n"
    )
    want = str(status.of("sm100 paged logits"))
    assert (docs / "page.md").read_text() == f"| a | {_inline('sm100 paged logits', want)} |\n"
    (docs / "status.md").write_text("# stale\n")
    assert gen_status_doc.main(["--check"]) == 1
    with pytest.raises(ValueError, match="status"):
        status.with_summary("no markers\n")
    with pytest.raises(KeyError, match="known"):
        status.with_inline(_inline("no such kernel", "x"))


# The inline statuses each page must state from the record (the sites that typed them).
INLINE_SITES = {
    "README.md": {"command buffers"},
    "docs/prefill.md": {"sm90 prefill logits", "sm100 prefill logits"},
    "docs/sparse_consumer.md": {"sm90 sparse logits", "sm100 sparse logits"},
    "docs/ffi_targets.md": {
        "command buffers",
        "sm100 prefill logits",
        "sm100 paged logits",
        "sm100 sparse logits",
    },
}


def test_inline_statuses_are_current():
    for f in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = f.read_text()
        assert text == status.with_inline(text), (
            f"{f.name}'s inline statuses are stale: run python scripts/gen_status_doc.py"
        )
    for name, want in INLINE_SITES.items():
        found = {m["name"] for m in status.INLINE.finditer((ROOT / name).read_text())}
        assert want <= found, f"{name} lacks the inline statuses {sorted(want - found)}"


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
    """The README and docs (less their generated status text), the package's sources and the
    C++ / CUDA sources."""
    files = [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "dsv41_jax").rglob("*.py"),
        *(p for d in ("ffi", "cuda") for p in (ROOT / d).iterdir() if p.is_file()),
    ]
    texts = [(f, f.read_text()) for f in files if f.name not in ("status.md", "status.py")]
    return [(f, status.without_generated(text)) for f, text in texts]


# A typed status: what the records say, written by hand.
TYPED = re.compile(
    r"compile-verified|verified on (the |an? )?[A-Z]\d{3}|(tested|run|ran) on (the |an? )[A-Z]\d{3}"
    r"|never run in this project|no (SM100|Blackwell) (GPU|machine)",
    re.IGNORECASE,
)


def test_no_status_is_typed_outside_the_generated_text():
    """The README, docs, docstrings and kernel comments state a status only through the
    generated text (an inline status, the README's lines) or by pointing to docs/status.md: once
    a record changes, no claim left in prose contradicts it."""
    for f, text in _texts():
        for i, line in enumerate(text.splitlines()):
            assert not TYPED.search(line), f"{f.name}:{i + 1}: {line}"


def test_the_dcp_sparse_claims_follow_its_record():
    """The DCP docs say what dcp_select's "auto" does by reading the record, not by a claim."""
    text = (ROOT / "docs" / "multi_device.md").read_text()
    assert '"dcp sparse path"' in text and "host devices only so far" not in text
