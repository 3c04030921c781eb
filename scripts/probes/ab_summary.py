"""Medians of `filter_ab.sh` output: per shape, each variant's event-timed µs per launch (the
median of its runs, then the runs), and for the first three shapes each variant's median phase
ends in the order they fall; then whether every variant selected the same positions (the
probes' DIGEST lines: one exact answer a shape).

    python scripts/probes/ab_summary.py ab.txt
"""

import collections
import re
import statistics
import sys

LINE = re.compile(r"(\S+) (\S+) TIME (k=\d+ \[\d+, \d+\]): ([\d.]+) us.*?phase ends \(us\):(.*)")
DIGEST = re.compile(r"(\S+) (\S+) DIGEST (k=\d+ \[\d+, \d+\]): (\w+)")

times = collections.defaultdict(list)
phases = collections.defaultdict(lambda: collections.defaultdict(list))
digests = collections.defaultdict(set)
with open(sys.argv[1]) as f:
    for line in f:
        d = DIGEST.match(line)
        if d:
            digests[d.group(2), d.group(3)].add((d.group(1), d.group(4)))
            continue
        m = LINE.match(line)
        if not m:
            continue
        name, _, shape, us, ends = m.groups()
        times[shape, name].append(float(us))
        for phase, at in re.findall(r" (\d+):([\d.]+)", ends):
            phases[shape, name][int(phase)].append(float(at))
shapes = list(dict.fromkeys(s for s, _ in times))
names = list(dict.fromkeys(n for _, n in times))
print("shape | " + " | ".join(names))
for s in shapes:
    runs = [times[s, n] for n in names]
    cells = [f"{statistics.median(r):.2f} ({','.join(f'{x:.1f}' for x in r)})" for r in runs]
    print(s, "|", " | ".join(cells))
for s in shapes[:3]:
    for n in names:
        ends = sorted((statistics.median(v), p) for p, v in phases[s, n].items())
        print("PH", s, n, " ".join(f"{p}:{at:.2f}" for at, p in ends))
differ = {key: seen for key, seen in digests.items() if len({h for _, h in seen}) > 1}
for (probe, shape), seen in differ.items():
    print("DIGESTS DIFFER", probe, shape, " ".join(f"{n}={h}" for n, h in sorted(seen)))
if digests and not differ:
    print(f"digests agree: {len(digests)} probe shapes, every variant and run")
