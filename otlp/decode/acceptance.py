"""``otlp bench acceptance``: alpha* over (n, top-k) on (p, q) pairs collected from the decode loop (GR Figure 1).

For i.i.d. drafts alpha* = 1 + min_m psi_m with psi_m = P_m - Q_m^n over the prefixes of the tokens sorted by
decreasing q/p (GR Thm 3.1 and Lemma 6.3). Top-k is applied to the DRAFT only: q is truncated to its k largest
entries and renormalised, p is left as it is (GR App. N). :func:`iid_optimal_acceptance` evaluates a whole batch
of pairs at once (the optimal sampler's :func:`otlp.optimal.chains.prefix`); the tests check it against
``otlp.optimal_acceptance`` and brute force over subsets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from otlp.core.distributions import check_n
from otlp.core.errors import InputError, MissingDependencyError


def iid_optimal_acceptance(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """alpha* for ``IID(q_m, n)`` against ``p_m`` for every row: p, q float [M, V] (rows summing to 1) ->
    float64 [M], by :func:`otlp.optimal.chains.prefix`."""
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    if p.shape != q.shape:
        raise InputError(f"p and q must have the same shape [M, V], got {p.shape} and {q.shape}")
    from otlp.optimal import host  # chains.prefix, in its C kernel where built

    return host.prefix(p, q, check_n(n)).alpha  # the sampler's sort and psi (GR Lemma 6.3)


def top_k_draft(q: np.ndarray, k: int | None) -> np.ndarray:
    """q restricted to its k largest entries (ties: lower id) and renormalised; None keeps q whole (a copy;
    :func:`otlp.optimal.truncate_top_k` row by row)."""
    from otlp.optimal import truncate_top_k

    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    out = truncate_top_k(q, k)
    return out.copy() if out is q else out


def acceptance_sweep(p: np.ndarray, q: np.ndarray, ns: Sequence[int], top_ks: Sequence[int | None]) -> dict:
    """Mean alpha* over the pairs for every (n, top-k): ``{"alpha": [[...] per n] per top-k, ...}``."""
    alpha = np.empty((len(top_ks), len(ns)))
    for a, k in enumerate(top_ks):
        qk = top_k_draft(q, k)
        for b, n in enumerate(ns):
            alpha[a, b] = iid_optimal_acceptance(p, qk, int(n)).mean()
    return {"n": [int(n) for n in ns], "top_k": [None if k is None else int(k) for k in top_ks],
            "alpha": alpha.tolist(), "pairs": int(np.atleast_2d(p).shape[0])}


def format_sweep(sweep: dict, V: int) -> str:
    head = f"{'top-k':>8} " + " ".join(f"{'n=' + str(n):>8}" for n in sweep["n"])
    rows = [f"mean alpha* over {sweep['pairs']} (p, q) pairs from the decode loop (i.i.d. drafts, top-k on q)", head]
    for k, values in zip(sweep["top_k"], sweep["alpha"], strict=True):
        label = f"V={V}" if k is None else str(k)
        rows.append(f"{label:>8} " + " ".join(f"{v:8.4f}" for v in values))
    return "\n".join(rows)


def plot_sweep(sweep: dict, V: int, path: str | Path) -> Path:
    """alpha* against top-k (log axis), one line per n, written as a PNG (matplotlib, Agg backend)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("matplotlib", "the acceptance plot", "decode") from None
    ks = [V if k is None else k for k in sweep["top_k"]]
    alpha = np.asarray(sweep["alpha"])  # [K, N]
    fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
    for b, n in enumerate(sweep["n"]):
        ax.plot(ks, alpha[:, b], marker="o", label=f"n = {n}")
    ax.set_xscale("log")
    ax.set_xlabel("top-k on the draft")
    ax.set_ylabel("mean optimal acceptance alpha*")
    ax.set_title("alpha* vs top-k and n (embedded n-gram pair)" if V else "alpha*")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def collect_pairs(draft_model: object, target_model: object, prompts: list[list[int]], pairs: int,
                  temperature: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) at the step roots of a decode run: float64 [pairs, V] each."""
    from otlp.decode.loop import decode

    steps_needed = -(-pairs // len(prompts))  # one root per prompt and step; a step emits at most 2 tokens (L = 1)
    result = decode(draft_model, target_model, "rrs", 1, 1, prompts=prompts, max_new_tokens=2 * steps_needed,
                    temperature=temperature, seed=seed, collect=pairs)
    p = np.stack([t.numpy() for t in result.root_p])
    q = np.stack([t.numpy() for t in result.root_q])
    return p, q


def run_acceptance(draft_model: object, target_model: object, prompts: list[list[int]], *, pairs: int = 256,
                   ns: Sequence[int] = (1, 2, 4, 8), top_ks: Sequence[int | None] = (10, 100, 1000, None),
                   temperature: float = 1.0, seed: int = 0, out_dir: str | Path | None = None) -> dict:
    """Collect pairs, sweep, and (with ``out_dir``) write ``acceptance_sweep.json`` and ``acceptance_sweep.png``."""
    start = time.perf_counter()
    p, q = collect_pairs(draft_model, target_model, prompts, pairs, temperature, seed)
    V = p.shape[1]
    sweep = acceptance_sweep(p, q, ns, [None if (k is None or k >= V) else k for k in top_ks])
    notes = [f"top-k {k} >= V = {V} keeps all of q: run as untruncated (the same as 'all')"
             for k in top_ks if k is not None and k >= V]
    sweep.update({"V": V, "temperature": temperature, "seconds": time.perf_counter() - start, "notes": notes})
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        sweep["png"] = str(plot_sweep(sweep, V, out / "acceptance_sweep.png"))
        (out / "acceptance_sweep.json").write_text(json.dumps(sweep, indent=2))
    return sweep
