"""Write the status text from dsv41_jax/status.py (what has been verified where): docs/status.md,
the README's status lines and the inline statuses of the README and docs/*.md.

    python scripts/gen_status_doc.py          # rewrite docs/status.md and the generated text
    python scripts/gen_status_doc.py --check  # exit 1 if any of it is not current

tests/test_status.py runs the check on CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsv41_jax import status

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "status.md"
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    want = {p: status.with_inline(p.read_text()) for p in sorted(DOCS.glob("*.md")) if p != OUT}
    want[README] = status.with_summary(status.with_inline(README.read_text()))
    want[OUT] = status.markdown()
    if args.check:
        stale = [p for p, text in want.items() if not p.exists() or p.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run python scripts/gen_status_doc.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in want.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
