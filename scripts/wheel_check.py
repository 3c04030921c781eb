"""The built wheel as a user meets it: `make wheel-check` runs this with the Python of a fresh
venv the wheel is installed in, from a folder outside the checkout, in isolated mode (`-I`: no
PYTHONPATH, not even this script's folder on sys.path), so `import dsv41_jax` can only find the
installed wheel. Checks the wheel's file list (the package and its metadata only: no tests,
scripts, examples or C++/CUDA sources), the installed version against the wheel's, and one op
through the public API against numpy. Exits non-zero on the first failure.

    python -I scripts/wheel_check.py dist/dsv41_jax-<version>-py3-none-any.whl
"""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from pathlib import Path, PurePosixPath

import jax
import jax.numpy as jnp
import numpy as np

# Folders of the checkout a user never needs, and sources the pure-Python wheel must not ship.
NOT_SHIPPED_DIRS = {"tests", "scripts", "examples", "docs", "cuda", "ffi", "bench_plots", "build"}
NOT_SHIPPED_SUFFIXES = {".cu", ".cuh", ".cc", ".cpp", ".h", ".so", ".pyc", ".ipynb"}


def say(line: str) -> None:
    print(f"[dsv41_jax] wheel-check: {line}", flush=True)


def fail(line: str) -> None:
    print(f"[dsv41_jax] wheel-check FAILED: {line}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def check_file_list(wheel: Path) -> str:
    """The wheel holds `dsv41_jax/` and its dist-info only; returns the wheel's version."""
    name, version, *_ = wheel.name.split("-")
    if name != "dsv41_jax" or not wheel.name.endswith("-py3-none-any.whl"):
        fail(f"{wheel.name}: expected dsv41_jax-<version>-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"dsv41_jax-{version}.dist-info"
    say(f"{wheel.name} holds {len(names)} files:")
    folders: dict[tuple[str, ...], list[str]] = {}
    for n in sorted(names):
        folders.setdefault(PurePosixPath(n).parts[:-1], []).append(PurePosixPath(n).name)
    for folder, files in sorted(folders.items()):
        print(f"    {'/'.join(folder)}/: {' '.join(files)}")
    wrong = [
        n
        for n in names
        if PurePosixPath(n).parts[0] not in ("dsv41_jax", dist_info)
        or NOT_SHIPPED_DIRS & set(PurePosixPath(n).parts[:-1])
        or PurePosixPath(n).suffix in NOT_SHIPPED_SUFFIXES
    ]
    if wrong:
        fail(f"files a user does not need: {wrong}")
    needed = ["dsv41_jax/__init__.py", "dsv41_jax/py.typed", f"{dist_info}/licenses/LICENSE"]
    if missing := [n for n in needed if n not in names]:
        fail(f"missing from the wheel: {missing}")
    return version


def expected_topk(scores, lengths, k):
    """The contract's top-k per row in numpy: the k best positions by (score desc, position
    asc) among those before the row's length that are not NaN or -inf, ascending, -1 padded."""
    out = np.full((len(scores), k), -1, np.int32)
    for r, (row, length) in enumerate(zip(scores, lengths)):
        ok = [p for p in range(length) if not np.isnan(row[p]) and row[p] > -np.inf]
        best = sorted(sorted(ok, key=lambda p: (-row[p], p))[:k])
        out[r, : len(best)] = best
    return out


def main() -> None:
    (wheel,) = (Path(a).resolve() for a in sys.argv[1:])
    version = check_file_list(wheel)

    import dsv41_jax as dj  # after the file list: a missing module shows there first

    where = Path(dj.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        fail(f"dsv41_jax imported from {where}, not from this venv ({sys.prefix})")
    if dj.__version__ != version or importlib.metadata.version("dsv41_jax") != version:
        fail(
            f"dsv41_jax.__version__ {dj.__version__}, installed metadata "
            f"{importlib.metadata.version('dsv41_jax')}, wheel {version}: they must agree"
        )
    say(f"dsv41_jax {dj.__version__} imported from {where.parent}")

    # Ties (one decimal), a NaN, a -inf, a row shorter than k and an empty row.
    rng = np.random.default_rng(0)
    scores = np.round(rng.standard_normal((4, 64)), 1).astype(np.float32)
    scores[0, 3], scores[1, 7] = np.nan, -np.inf
    lengths, k = [64, 30, 5, 0], 8
    got = np.asarray(dj.topk(jnp.asarray(scores), jnp.asarray(lengths, jnp.int32), k))
    want = expected_topk(scores, lengths, k)
    if not np.array_equal(got, want):
        fail(f"topk on the CPU:\n{got}\nnumpy:\n{want}")
    say(f"topk of [4, 64] k={k} on jax {jax.__version__} (CPU) equals numpy's")


if __name__ == "__main__":
    main()
