"""Write docs/status.md from dsv41_jax/status.py (what has been verified where).

    python scripts/gen_status_doc.py          # rewrite docs/status.md
    python scripts/gen_status_doc.py --check  # exit 1 if docs/status.md is not current

tests/test_status.py runs the check on CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsv41_jax import status

OUT = Path(__file__).resolve().parents[1] / "docs" / "status.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = status.markdown()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python scripts/gen_status_doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
