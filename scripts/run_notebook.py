"""Execute a notebook with a real Jupyter kernel (nbclient + ipykernel, headless) and store its
outputs, so it reads with results without a Jupyter server. Figures come from the kernel's own
inline backend, exactly as a reader's Jupyter shows them.

    python scripts/run_notebook.py [NOTEBOOK] [--out OUT | --in-place]

Default notebook: examples/quickstart.ipynb; default output: NOTEBOOK with `.executed` before
its suffix (the source is rewritten only with --in-place).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def execute(path: Path, timeout: int = 900):
    """The executed notebook (nbformat node); raises on a cell error."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline backend
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=env)
    return nb


def default_output(path: Path) -> Path:
    """Where the executed notebook goes without --out / --in-place (git ignores it)."""
    return path.with_suffix(".executed.ipynb")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", nargs="?", default="examples/quickstart.ipynb")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--out", help="write the executed notebook here")
    where.add_argument("--in-place", action="store_true", help="overwrite the notebook itself")
    args = ap.parse_args()
    import nbformat

    path = Path(args.notebook)
    out = path if args.in_place else Path(args.out) if args.out else default_output(path)
    nb = execute(path)
    nbformat.write(nb, out)
    cells = sum(c.cell_type == "code" for c in nb.cells)
    print(f"{out}: {cells} code cells run with a real kernel, outputs stored")


if __name__ == "__main__":
    main()
