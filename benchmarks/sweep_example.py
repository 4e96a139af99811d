"""The sweep example of docs/SWEEP.md (and the README's summary), end to end: capture the embedded pair's
verification nodes, sweep them, publish the table of mean acceptance (and mean gap to alpha*) by n.

Runs the two commands docs/SWEEP.md shows, in a temporary folder (about 40 s on 2 cores):

    otlp decode --batch 64 --max-new-tokens 192 --n 4 --L 4 --no-baseline --capture cap --capture-storage dense
    otlp sweep cap --n 1,2,4,8 --top-k all,10 --out cap_sweep

then publishes ``sweep_example/acceptance`` (benchmarks/published/sweep_example.json, see readme_tables.py) from
``cap_sweep/sweep.json`` and copies its acceptance plot to docs/sweep_acceptance.png. ``--from-json PATH`` publishes
the table of a finished sweep's sweep.json without re-running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
RULES = ("sps", "rrs", "kseq", "spechub", "greedy")
DECODE = ["decode", "--batch", "64", "--max-new-tokens", "192", "--n", "4", "--L", "4", "--no-baseline",
          "--no-progress", "--capture", "cap", "--capture-storage", "dense", "--json"]
SWEEP = ["sweep", "cap", "--n", "1,2,4,8", "--top-k", "all,10", "--out", "cap_sweep", "--json"]


def publish(sweep: dict) -> None:
    """Mean alpha* and each rule's mean acceptance (mean gap) by n, q untruncated."""
    cols = ["n", "alpha*", *RULES]
    rows = []
    for r in sweep["summary"]["by_n"]:
        if r["q_top_k"] != 0:
            continue
        cells = [str(r["n"]), f"{r['alpha_star']:.4f}"]
        for rule in RULES:
            acc, gap = r.get(f"acc_{rule}"), r.get(f"gap_{rule}")
            cells.append("-" if acc is None else f"{acc:.4f} ({'0' if abs(gap) < 5e-4 else f'{gap:.3f}'})")
        rows.append(cells)
    settings = {"pairs": sweep["capture"]["rows"], "V": sweep["capture"]["V"], "storage": sweep["capture"]["storage"],
                "commands": ["otlp " + " ".join(DECODE), "otlp " + " ".join(SWEEP)]}
    readme_tables.publish("sweep_example", "acceptance", cols, rows, settings)
    print(f"\n<!-- table: sweep_example/acceptance -->\n{readme_tables.markdown(cols, rows)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-json", metavar="PATH", help="publish the table of a finished sweep.json and exit")
    args = parser.parse_args()
    if args.from_json:
        publish(json.loads(Path(args.from_json).read_text()))
        return
    otlp = [sys.executable, "-m", "otlp.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        for argv in (DECODE, SWEEP):
            print("otlp " + " ".join(argv), flush=True)
            subprocess.run(otlp + argv, cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        sweep = json.loads((Path(tmp) / "cap_sweep" / "sweep.json").read_text())
        print(f"{sweep['capture']['rows']} nodes, swept in {sweep['seconds']:.1f} s")
        shutil.copyfile(Path(tmp) / "cap_sweep" / "sweep_acceptance.png", ROOT / "docs" / "sweep_acceptance.png")
        publish(sweep)


if __name__ == "__main__":
    main()
