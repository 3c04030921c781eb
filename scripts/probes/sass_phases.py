"""How many instructions each phase of a kernel issues, phase by phase: the phases are the
stretches of its SASS between the phase stamps of `topk_phases.cu` / `onchip_phases.cu`
(`DSV41_PHASE_STAMPS`: a %globaltimer read each) and its block barriers. A row of one CTA is
issue-bound (32 warps on one SM: each warp instruction costs the row about 8 cycles), so
instructions a warp are what its time follows.

Static counts, on any machine with nvcc and nvdisasm (the `nvidia-cuda-nvdisasm` wheel has
one: `pip download nvidia-cuda-nvdisasm`, unzip, pass its `bin/nvdisasm` with --nvdisasm);
every path of the kernel is counted, so compare a phase with its own count in another build:

    python scripts/probes/sass_phases.py static [--include cuda] [--define MACRO=1 ...] \
        [--kernel ShortTopkCtaKernelIfE]

Executed counts a warp, from Nsight Compute's SASS source page of one launch (on the device:
`ncu --kernel-name regex:ShortTopkCtaKernel --launch-count 1 --set full -o rep <probe>`, then
`ncu --import rep.ncu-rep --page source --print-source sass --csv > sass.csv`):

    python scripts/probes/sass_phases.py executed sass.csv [--warps 32]

Prints each phase's instruction count (and its closing instruction) in program order, then
the total.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import re
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROBE = ROOT / "scripts" / "probes" / "topk_phases.cu"


def closes_phase(instruction: str) -> bool:
    """A phase stamp (a %globaltimer read), a block barrier or the exit."""
    return "GLOBALTIMER" in instruction or "BAR.SYNC" in instruction or " EXIT" in f" {instruction}"


def report(phases: list[tuple[str, float]]) -> None:
    print(" ".join(f"{n:.0f}[{what}]" for what, n in phases if n))
    print(f"total {sum(n for _, n in phases):.0f}")


def static(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "probe.cubin"
        defines = [f"-D{d}" for d in args.define]
        subprocess.run(
            ["nvcc", "-O3", "-std=c++20", "-arch=sm_90a", f"-I{args.include}", "-DPROBE_SHORT"]
            + defines
            + ["-cubin", str(PROBE), "-o", str(cubin)],
            check=True,
            cwd=ROOT,
        )
        sass = subprocess.run(
            [args.nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True
        ).stdout
    for function in re.split(r"\n\s*\.text\.", sass):
        if args.kernel not in function.split(":", 1)[0]:
            continue
        phases, count = [], 0
        for line in function.splitlines():
            m = re.search(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", line)
            if not m:
                continue
            count += 1
            if closes_phase(m.group(1)):
                phases.append(("stamp" if "GLOBALTIMER" in m.group(1) else "BAR", count))
                count = 0
        phases.append(("end", count))
        print(function.split(":", 1)[0])
        report(phases)


def executed(args: argparse.Namespace) -> None:
    with open(args.csv) as f:
        rows = list(csv.reader(f))
    header = next(r for r in rows if "Instructions Executed" in r)
    source, executed_ = header.index("Source"), header.index("Instructions Executed")
    phases, count = [], 0
    for row in rows[rows.index(header) + 1 :]:
        n = int(row[executed_] or 0)
        if n == 0:
            continue
        count += n
        instruction = row[source].strip()
        if closes_phase(instruction):
            phases.append(("stamp" if "GLOBALTIMER" in instruction else "BAR", count / args.warps))
            count = 0
    phases.append(("end", count / args.warps))
    report(phases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("static", help="static counts of a build (nvcc + nvdisasm)")
    s.add_argument("--include", default="cuda", help="the kernels' folder (another build's cuda/)")
    s.add_argument("--define", action="append", default=[], help="MACRO=value, repeatable")
    s.add_argument("--kernel", default="ShortTopkCtaKernelIfE", help="a part of its mangled name")
    s.add_argument("--nvdisasm", default="nvdisasm")
    s.set_defaults(run=static)
    e = sub.add_parser("executed", help="executed counts a warp from an ncu SASS source export")
    e.add_argument("csv")
    e.add_argument("--warps", type=int, default=32, help="warps of the launch (to count a warp)")
    e.set_defaults(run=executed)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
