"""The installed package, run from outside the checkout: the CLI's example, the exact rule at V = 400 and the batched
optimal sampler at V = 32k. ``--kernels yes|no`` says whether the C kernels must have been built into the wheel."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import otlp
from otlp.backend import native
from otlp.optimal import OptimalTransport
from otlp.verifiers import get

parser = argparse.ArgumentParser()
parser.add_argument("--kernels", choices=("yes", "no"), required=True)
parser.add_argument("--checkout", type=Path, required=True)
args = parser.parse_args()

where = Path(otlp.__file__).resolve()
assert args.checkout.resolve() not in where.parents, f"otlp imported from the checkout: {where}"
assert (native.library() is not None) == (args.kernels == "yes"), native.reason()
assert not list(where.parent.rglob("*.c")), "the wheel ships C sources it does not need"

example = subprocess.run([Path(sys.executable).with_name("otlp"), "solve", "--example"], capture_output=True,
                         text=True, check=True)
assert "alpha" in example.stdout.lower(), example.stdout

rng = np.random.default_rng(0)
p, q = rng.dirichlet(np.ones(400)), rng.dirichlet(np.ones(400))
ot = OptimalTransport(p, otlp.IID(q, 3))
assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, 3))) < 1e-9

g = torch.Generator().manual_seed(0)
P = torch.softmax(2 * torch.randn(4, 32_000, generator=g), dim=1)
Q = torch.softmax(torch.log(P) + 0.5 * torch.randn(4, 32_000, generator=g), dim=1)
drafts = torch.multinomial(Q, 4, replacement=True, generator=g)
tokens, index = get("optimal").sample(P, Q, drafts, g)
assert tokens.shape == (4,) and bool(((tokens >= 0) & (tokens < 32_000)).all())
print(f"smoke: otlp {otlp.__version__} from {where.parent}, kernels {args.kernels}, alpha*(V=400, n=3) = "
      f"{ot.alpha:.6f}, optimal tokens {tokens.tolist()}")
