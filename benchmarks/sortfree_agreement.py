"""The cell rule (otlp/optimal/sortfree.py) against ``get("optimal").sample`` at scale: tokens and slots for the same
uniforms, and the refinement / fallback rates, per grid point (issue 41). ``--route host``: instead the CPU route
(its bounded window, ``otlp/backend/native/bucket_rule.c``'s ``window_bound``, ``buckets.BOUND``, and its run of p = 0
< q tokens, ``inf_run``) against the same sampler's full sort (the bucket route off), and its rates: rows certified at
the first attempt, on the retry (the uncertain buckets sorted), and left to the full sort.

LM-like rows from the tests' generator (``tests.optimal.instances.lm_rows``, cast to the point's dtype): the
grid's loose draft and close drafts (the target's logits plus sigma-scaled noise, sigma 1 and 0.5). The
certificate runs without its fallback; the rows it leaves take the fallback in a second call on those rows only (the
static route computes it on every row; the tokens are the same). ``--topk``: the target also filtered as engines do
before verification (k or a top-p mass; issue 41), after the drafts are drawn. Prints one line per (V, draft, n,
filter).

    python benchmarks/sortfree_agreement.py --V 32000 --rows 1024 --B 64
    python benchmarks/sortfree_agreement.py --V 128000 --rows 128 --B 16 --n 4
    python benchmarks/sortfree_agreement.py --route host --V 32000 --rows 11200 --B 64
    python benchmarks/sortfree_agreement.py --route host --V 2048 32000 --topk 1 50 1000 0.9 --rows 640
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from otlp.optimal import sortfree as SF
from otlp.optimal.sampler import _normalised
from otlp.verifiers import get

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optimal.instances import lm_rows  # noqa: E402 - one row generator for the tests and this script

DTYPES = (torch.float32, torch.bfloat16, torch.float64)


def rows(B: int, V: int, n: int, noise: float | str | None, seed: int, dtype, topk: float | None = None):  # noqa: ANN001, ANN201
    """The tests' LM-like rows (``tests.optimal.instances.lm_rows``) for a point: the loose draft (``noise`` None), a
    close one (sigma ``noise``) or ``"ties"``, ``n`` drafts, the target filtered by ``topk``."""
    return lm_rows(B, V, seed, "loose" if noise is None else noise, n, dtype, topk)


def point(V: int, n: int, noise: float | str | None, total: int, B: int, seed: int = 0,
          topk: float | None = None) -> dict[str, int]:
    out = {"rows": 0, "wrong": 0, **{f"round{r}": 0 for r in range(SF.ROUNDS + 1)}, "fallback": 0}
    for k in range(-(-total // B)):
        dtype = DTYPES[k % len(DTYPES)]
        p, q, drafts, u = rows(B, V, n, noise, 1_000_000 * seed + 1000 * n + k, dtype, topk)
        want = get("optimal").sample(p, q, drafts, None, uniforms=u)
        P, Q = _normalised(p), _normalised(q)
        d = SF.decide(P, Q, drafts, u, fallback=False)
        tokens, index = d.tokens.clone(), d.index.clone()
        left = d.rounds > SF.ROUNDS
        if left.any():
            rest = SF.decide(P[left], Q[left], drafts[left], u[left])
            tokens[left], index[left] = rest.tokens, rest.index
        out["rows"] += B
        out["wrong"] += int(((tokens != want[0]) | (index != want[1])).sum())
        for r in range(SF.ROUNDS + 1):
            out[f"round{r}"] += int((d.rounds == r).sum())
        out["fallback"] += int(left.sum())
    return out


def host_point(V: int, n: int, noise: float | str | None, total: int, B: int, seed: int = 0,
               topk: float | None = None) -> dict[str, int]:
    """The CPU route against its full sort on ``total`` rows: how many differ (token or slot), and the
    statuses of the bounded route's rows (``buckets._native_rows``: 1 certified at once, 2 on the retry, else the
    full sort, which some such rows take inside the call: ``buckets.whole_rows``)."""

    from otlp.optimal import buckets as BK

    out = {"rows": 0, "wrong": 0, "first": 0, "retry": 0, "full": 0}
    sc = BK.scheme(BK.bits_for(V))
    for k in range(-(-total // B)):
        dtype = DTYPES[k % len(DTYPES)]
        p, q, drafts, u = rows(B, V, n, noise, 1_000_000 * seed + 1000 * n + k, dtype, topk)
        got = get("optimal").sample(p, q, drafts, None, uniforms=u)
        takes, BK.takes = BK.takes, lambda B, V: False  # the full sort
        try:
            want = get("optimal").sample(p, q, drafts, None, uniforms=u)
        finally:
            BK.takes = takes
        ph, qh = (x.numpy() if x.dtype == torch.float64 else x.float().numpy() for x in (p, q))
        status = BK._native_rows(ph, qh, BK.inverse_sums(ph), BK.inverse_sums(qh), drafts.numpy(), u.numpy(), n,
                                 sc, whole=0)[2]  # (whole=0: the rows the buckets leave, in the call or not)
        out["rows"] += B
        out["wrong"] += int(((got[0] != want[0]) | (got[1] != want[1])).sum())
        out["first"] += int((status == 1).sum())
        out["retry"] += int((status > 1).sum())
        out["full"] += int((status <= 0).sum())
    return out


def _rates(r: dict[str, int]) -> str:
    """A grid point's rates: the host route's statuses, or the cell rule's rounds and fallback."""
    if "first" in r:
        return f"certified at once {r['first']}, on the retry {r['retry']}, full sort {r['full']}"
    rounds = " ".join(f"round {i}: {r[f'round{i}']}" for i in range(SF.ROUNDS + 1))
    return f"certified at {rounds}; fallback {r['fallback']}"


def _draft(name: str) -> float | str | None:
    """A ``--noise`` value as :func:`rows` takes it."""
    return None if name == "loose" else name if name == "ties" else float(name)


def _filter(name: str) -> float | None:
    """A ``--topk`` value as :func:`rows` takes it."""
    return None if name == "none" else float(name) if "." in name else int(name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, nargs="+", default=[32_000])
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--noise", nargs="+", default=["loose", "1", "0.5"])
    ap.add_argument("--rows", type=int, default=256, help="rows per grid point")
    ap.add_argument("--B", type=int, default=64, help="rows per call")
    ap.add_argument("--topk", nargs="+", default=["none"],
                    help="target filters: none, k (an int) or a top-p mass (a float below 1)")
    ap.add_argument("--seed", type=int, default=0, help="another seed: other rows than an earlier run's")
    ap.add_argument("--route", choices=["cell", "host"], default="cell",
                    help="cell: the cell rule (default); host: the CPU route's bounded window against the route "
                         "without it")
    args = ap.parse_args(argv)
    dtypes = [str(d)[6:] for d in DTYPES]
    if args.route == "host":
        torch.set_num_threads(1)
        run = host_point
        print(f"CPU route (bounded window, p = 0 runs) vs its full sort; dtypes cycled {dtypes}")
    else:
        run = point
        print(f"cell rule vs get('optimal').sample; rounds = {SF.ROUNDS}, refine = {SF.REFINE} cells, "
              f"dtypes cycled {dtypes}")
    total = {"rows": 0, "wrong": 0}
    for V in args.V:
        for noise in args.noise:
            for n in args.n:
                for topk in args.topk:
                    t = time.perf_counter()
                    r = run(V, n, _draft(noise), args.rows, args.B, args.seed, _filter(topk))
                    total["rows"] += r["rows"]
                    total["wrong"] += r["wrong"]
                    print(f"V {V:>7,} draft {noise:>5} n {n} top {topk:>4}: {r['rows']} rows, {r['wrong']} differ; "
                          f"{_rates(r)}  ({time.perf_counter() - t:.0f} s)", flush=True)
    print(f"total: {total['rows']} rows, {total['wrong']} differ")
    sys.exit(1 if total["wrong"] else 0)


if __name__ == "__main__":
    main()
