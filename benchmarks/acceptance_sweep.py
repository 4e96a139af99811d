"""alpha* over (n, top-k) on (p, q) pairs collected from the decode loop on the embedded n-gram pair (GR Figure 1).

Writes benchmarks/results/acceptance_sweep.{json,png}. Run: python benchmarks/acceptance_sweep.py [--pairs 512]
"""

from __future__ import annotations

import argparse
import sys

from otlp.cli.decode import add_acceptance_arguments, run_acceptance_cli

if __name__ == "__main__":
    parser = add_acceptance_arguments(argparse.ArgumentParser(description=__doc__))
    parser.set_defaults(pairs=512, ns="1,2,3,4,6,8", top_ks="2,5,10,30,100,300,1000,all")
    sys.exit(run_acceptance_cli(parser.parse_args()))
