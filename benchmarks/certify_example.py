"""The README's worked example: every verifier on the SpecHub paper's example (Figs. 4-5), q = (.5, .3, .2),
p = (.1, .6, .3), n = 2: exact acceptance, alpha* for its draft scheme, and the gap (as ``otlp certify --verifier
all``). Milliseconds. Prints the markdown table and publishes it (benchmarks/published/certify_example.json);
``--update-readme`` also rewrites the marked table in README.md (and any docs/ page that shows it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from readme_tables import markdown, publish, update_readme  # noqa: E402

from otlp.certification.rule import certify_table  # noqa: E402

P, Q, N = [0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 2
COLUMNS = ["verifier", "scheme", "acceptance", "alpha*", "gap"]


def rows() -> list[list[str]]:
    out = []
    for r in certify_table(np.array(P), np.array(Q), N, certificate=False):
        if isinstance(r, dict):  # not applicable to this example
            continue
        out.append([r.verifier, r.scheme, f"{r.acceptance:.4f}", f"{r.optimum:.4f}", f"{abs(r.gap):.4f}"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--update-readme", action="store_true", help="rewrite the marked table in README.md and docs/")
    args = parser.parse_args(argv)
    table = rows()
    path = publish("certify_example", "verifiers", COLUMNS, table, {"p": P, "q": Q, "n": N})
    print(markdown(COLUMNS, table))
    print(f"wrote {path}")
    if args.update_readme:
        update_readme("certify_example", "verifiers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
