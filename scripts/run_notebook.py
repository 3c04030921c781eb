"""Execute examples/quickstart.ipynb's code cells in order and store their outputs (text and
matplotlib figures as PNG) in the notebook, so it reads with results without a Jupyter server.

    python scripts/run_notebook.py [examples/quickstart.ipynb]
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import sys
from pathlib import Path


def run(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nb = json.loads(path.read_text())
    namespace: dict = {"__name__": "__main__"}
    shown: list[bytes] = []

    def show(*_a, **_k):  # plt.show() inside a cell: keep the figure as a PNG output
        for num in plt.get_fignums():
            buf = io.BytesIO()
            plt.figure(num).savefig(buf, format="png", dpi=90, bbox_inches="tight")
            shown.append(buf.getvalue())
        plt.close("all")

    plt.show = show
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        count += 1
        shown.clear()
        out = io.StringIO()
        source = "".join(cell["source"])
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"{path.name}[{count}]", "exec"), namespace)
        outputs = []
        if out.getvalue():
            outputs.append({"name": "stdout", "output_type": "stream", "text": out.getvalue()})
        for png in shown:
            outputs.append(
                {
                    "data": {
                        "image/png": base64.b64encode(png).decode(),
                        "text/plain": "<Figure>",
                    },
                    "metadata": {},
                    "output_type": "display_data",
                }
            )
        cell["outputs"], cell["execution_count"] = outputs, count
    path.write_text(json.dumps(nb, indent=1) + "\n")
    print(f"{path}: {count} code cells run, outputs stored")


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/quickstart.ipynb"))
