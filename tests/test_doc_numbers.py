"""Every measured figure the README and docs/*.md state is checked against the benchmarks: each
one is listed below with the row of BENCHMARKS.md (the newest measurement of each on a device
kind) or the sentence of BENCHMARKS_HISTORY.md it comes from, and a figure in the docs that is
not listed fails (cite it here or point to BENCHMARKS.md instead). The kernels' comments and
the comments and docstrings of the package and of benchmarks/ state no measured figure at all."""

from __future__ import annotations

import io
import re
import tokenize
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from benchmarks import report

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BENCH = (ROOT / "BENCHMARKS.md").read_text()
HISTORY = (ROOT / "BENCHMARKS_HISTORY.md").read_text()
# A measured figure: a number with a time, share or ratio unit (inline code is not scanned).
FIGURE = re.compile(r"\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?\s?(?:µs|us\b|ms\b|%|x\b|TB/s|GB/s)")

STEP, SELECT, TOPK = "decode step (publish + 4 selects)", "select (consumer layer)", "topk k=512"
TORCH_STEP = "DeepGEMM logits + torch selection (baseline)"
LOGITS = ("H200", "paged_mqa_logits", "bs64 x 128K", "ffi (DeepGEMM sm90)")
MOE = "default, MoE-sized blocks, PjRt client"

# (document, the text stating the figure, the figure, where it comes from): a BENCHMARKS.md row
# (its table, e.g. "H200", then op, shape, implementation) for "µs" (its device µs) or "% of
# floor" (floor / device µs), or a sentence of BENCHMARKS_HISTORY.md that states it.
CITED = [
    (
        "docs/serving.md",
        "a marginal 148.5 µs",
        "148.5",
        ("µs", ("H100", "indexer marginal span (model step)", "bs8 x 128K", MOE)),
    ),
    (
        "docs/serving.md",
        "for 149.2 µs of its kernels",
        "149.2",
        ("µs", ("H100", "indexer kernels (model step)", "bs8 x 128K", MOE)),
    ),
    (
        "docs/serving.md",
        "was 651.0 µs under",
        "651.0",
        ("sentence", "PjRt client's step at bs 8 x 128K (span 651.0 µs for 570.7 of kernels"),
    ),
    (
        "docs/serving.md",
        "and 554.2 µs under TFRT",
        "554.2",
        ("sentence", "under the TFRT client the same step's span is 554.2"),
    ),
    (
        "README.md",
        "69 µs at bs 1 × 16K",
        "69",
        ("µs", ("H200", STEP, "bs1 x 16K", "auto path (default)")),
    ),
    (
        "README.md",
        "139 µs at bs 8 × 128K",
        "139",
        ("µs", ("H200", STEP, "bs8 x 128K", "auto path (default)")),
    ),
    ("README.md", "torch ops: 645 µs", "645", ("µs", ("H200", STEP, "bs1 x 16K", TORCH_STEP))),
    ("README.md", "and 935 µs)", "935", ("µs", ("H200", STEP, "bs8 x 128K", TORCH_STEP))),
    (
        "README.md",
        "sparse path\n(20 µs",
        "20",
        ("µs", ("H200", SELECT, "bs8 x 128K", "sparse path")),
    ),
    ("README.md", "path 61 µs)", "61", ("µs", ("H200", SELECT, "bs8 x 128K", "mask path"))),
    (
        "README.md",
        "[8, 16K] in 5.8 µs",
        "5.8",
        ("µs", ("H100", TOPK, "[8, 16K]", "auto (default)")),
    ),
    (
        "README.md",
        "torch.topk 91 µs",
        "91",
        ("µs", ("H100", TOPK, "[8, 16K]", "torch.topk (baseline)")),
    ),
    (
        "README.md",
        "[64, 128K] in\n13.7 µs",
        "13.7",
        ("µs", ("H100", "masked topk k=512", "[64, 128K]", "auto (default)")),
    ),
    (
        "README.md",
        "[8, 128K] in 10.3 µs",
        "10.3",
        ("µs", ("H100", TOPK, "[8, 128K]", "auto (default)")),
    ),
    (
        "README.md",
        "torch.topk 79 µs",
        "79",
        ("µs", ("H100", TOPK, "[8, 128K]", "torch.topk (baseline)")),
    ),
    ("README.md", "[8, 1M] in 38 µs", "38", ("µs", ("H100", TOPK, "[8, 1024K]", "ffi filter"))),
    (
        "README.md",
        "torch.topk 173 µs",
        "173",
        ("µs", ("H100", TOPK, "[8, 1024K]", "torch.topk (baseline)")),
    ),
    ("README.md", "at 89% of copy bandwidth", "89", ("% of floor", LOGITS)),
    (
        "README.md",
        "78% of the FP8 tensor-core peak at 32K tokens",
        "78",
        ("sentence", "78% of the FP8 WGMMA peak at 32K tokens"),
    ),
]


def bench_rows() -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """(table, op, shape, implementation) -> (device µs, floor µs), from BENCHMARKS.md."""
    return report.published(BENCH)


def rounded(value: float, like: str) -> str:
    places = len(like.partition(".")[2])
    step = Decimal(1).scaleb(-places)
    return str(Decimal(repr(value)).quantize(step, rounding=ROUND_HALF_UP))


@pytest.mark.parametrize("doc,text,figure,source", CITED, ids=[c[1] for c in CITED])
def test_cited_figure_matches_benchmarks(doc, text, figure, source):
    flat = " ".join((ROOT / doc).read_text().split())
    assert " ".join(text.split()) in flat, f"{doc} no longer says {text!r}: update CITED"
    kind, where = source
    if kind == "sentence":
        assert where in " ".join(HISTORY.split()), f"BENCHMARKS_HISTORY.md does not say {where!r}"
        return
    us, floor = bench_rows()[where]
    value = us if kind == "µs" else 100 * floor / us
    assert rounded(value, figure) == figure, f"{doc}: {text!r}, but BENCHMARKS.md has {value:.1f}"


def test_every_figure_in_the_docs_is_cited():
    for doc in DOCS:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.DOTALL | re.MULTILINE)
        flat = re.sub(r"`[^`]*`", "", " ".join(prose.split()))
        covered = [
            range(m.start(), m.end())
            for cited_doc, text, _, _ in CITED
            if ROOT / cited_doc == doc
            for m in re.finditer(re.escape(" ".join(text.split())), flat)
        ]
        for m in FIGURE.finditer(flat):
            context = flat[max(0, m.start() - 60) : m.end() + 20]
            assert any(m.start() in r for r in covered), (
                f"{doc.name} states {m.group()!r} ({context!r}), which no entry of"
                " tests/test_doc_numbers.py checks against BENCHMARKS.md"
            )


def test_rounding():
    assert rounded(654.5, "655") == "655" and rounded(10.94, "10.9") == "10.9"


# A measured figure in code: a time, bandwidth, share or ratio ("0.4 us", "2.8 TB/s", "12%",
# "1.8x"; "8 x 16384", a shape, is not one).
CODE_FIGURE = re.compile(
    r"\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?(?:\s?(?:µs|us\b|ms\b|ns\b|TB/s|GB/s)|%|x\b|×)"
)


def _cxx_comments(text: str) -> list[tuple[int, str]]:
    return [
        (i, line[line.index("//") :]) for i, line in enumerate(text.splitlines(), 1) if "//" in line
    ]


def _py_comments_and_docstrings(text: str) -> list[tuple[int, str]]:
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        doc = tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU")[:3] in ('"""', "'''")
        if tok.type == tokenize.COMMENT or doc:
            out += [(tok.start[0] + k, line) for k, line in enumerate(tok.string.splitlines())]
    return out


def test_no_measured_figure_in_kernel_comments_or_docstrings():
    """A figure belongs to a run: the kernels' comments and the docstrings of the package and of
    benchmarks/ say why (the mechanism) and cite BENCHMARKS.md or BENCHMARKS_HISTORY.md for the
    measurement."""
    found = []
    for path in sorted([*(ROOT / "cuda").iterdir(), *(ROOT / "ffi").iterdir()]):
        if path.is_file():
            found += [(path, i, s) for i, s in _cxx_comments(path.read_text())]
    for path in sorted([*(ROOT / "dsv41_jax").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        found += [(path, i, s) for i, s in _py_comments_and_docstrings(path.read_text())]
    bad = [f"{p.relative_to(ROOT)}:{i}: {s.strip()}" for p, i, s in found if CODE_FIGURE.search(s)]
    assert not bad, "measured figures in code (cite BENCHMARKS.md instead):\n" + "\n".join(bad)
