"""Write docs/status.md and the README's status lines from dsv41_jax/status.py (what has been
verified where).

    python scripts/gen_status_doc.py          # rewrite docs/status.md and the README's lines
    python scripts/gen_status_doc.py --check  # exit 1 if either is not current

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    want = {OUT: status.markdown(), README: status.with_summary(README.read_text())}
    if args.check:
        stale = [p for p, text in want.items() if not p.exists() or p.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run python scripts/gen_status_doc.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in want.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
