"""PNG plots of a run's decode-step rows."""

from __future__ import annotations

import os

from benchmarks.table import Row


def plot_step(rows: list[Row], out_dir: str, title: str) -> list[str]:
    """PNG plots of the step rows: step time against context (per batch, per path) and the
    per-layer split (publish + 4 × select) for each shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def parse(shape: str) -> tuple[int, int]:
        bs, ctx = shape.split(" x ")
        return int(bs[2:]), int(ctx[:-1]) * 1024

    step = [r for r in rows if r.op == "decode step (publish + 4 selects)"]
    if not step:
        return []
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    batches = sorted({parse(r.shape)[0] for r in step})
    impls = list(dict.fromkeys(r.impl for r in step))
    markers = "osD^v<>phX*"
    style = {  # one colour and marker per implementation, the same in every panel
        impl: (plt.get_cmap("tab20")(i % 20), markers[i % len(markers)])
        for i, impl in enumerate(impls)
    }
    fig, axes = plt.subplots(
        1, len(batches), figsize=(4.6 * len(batches), 4), squeeze=False, sharey=True
    )
    for ax, bs in zip(axes[0], batches):
        for impl in impls:
            pts = sorted(
                (parse(r.shape)[1], r.us)
                for r in step
                if r.impl == impl and parse(r.shape)[0] == bs
            )
            if pts:
                color, marker = style[impl]
                ax.plot(
                    [p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=impl
                )
        ax.set(xscale="log", yscale="log", xlabel="context (positions)", title=f"bs {bs}")
    axes[0][0].set_ylabel("µs per step (kernel time)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title, fontsize=9)
    paths.append(os.path.join(out_dir, "step_time.png"))
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), squeeze=False)
    for ax, bs in zip(axes[0], batches):
        shapes = [sh for sh in dict.fromkeys(r.shape for r in step) if parse(sh)[0] == bs]
        for i, shape in enumerate(shapes):
            pub = next((r.us for r in rows if r.op == "publish (layer 20)" and r.shape == shape), 0)
            for j, path in enumerate(("sparse", "mask")):
                sel = next(
                    (
                        r.us
                        for r in rows
                        if r.op == "select (consumer layer)"
                        and r.shape == shape
                        and r.impl == f"{path} path"
                    ),
                    0.0,
                )
                x = i + (j - 0.5) * 0.38
                ax.bar(x, pub, 0.36, color="tab:blue", label="publish" if i == j == 0 else None)
                bar_color = "tab:orange" if path == "sparse" else "tab:red"
                label = f"4 × select ({path})" if i == 0 else None
                ax.bar(x, 4 * sel, 0.36, bottom=pub, color=bar_color, label=label)
        ax.set_xticks(range(len(shapes)), [sh.split(" x ")[1] for sh in shapes])
        ax.set(title=f"bs {bs} (left bar: sparse, right: mask)", xlabel="context")
    axes[0][0].set_ylabel("device µs, layers timed alone")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "step_split.png"))
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close("all")
    return paths
