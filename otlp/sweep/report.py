"""Aggregates of a sweep (by n, depth and entropy bucket, for each draft top-k), the terminal table, JSON and plots.

Aggregation streams over the per-shard result tables (:class:`Aggregate`), so a sweep of millions of pairs never
holds them all: per group it keeps counts and sums (means of alpha*, of each rule's acceptance and gap) and, for the
gap plots, a fixed-bin histogram of each rule's gap.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from otlp.core.errors import MissingDependencyError

#: Entropy buckets of p, in bits: [0, 0.5), [0.5, 1), [1, 2), [2, 4), [4, 8), [8, inf).
ENTROPY_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
#: Gap histogram bins (alpha* - acceptance lies in [-1, 1]; most of the mass is near 0).
GAP_BINS = np.linspace(-0.25, 0.75, 201)


def entropy_label(i: int) -> str:
    lo, hi = ENTROPY_EDGES[i], ENTROPY_EDGES[i + 1]
    return f"[{lo:g}, {hi:g})" if math.isfinite(hi) else f">= {lo:g}"


class Aggregate:
    """Running sums of the per-pair columns, grouped by (q_top_k, n) and by depth / entropy bucket within."""

    def __init__(self, rules: list[str]):
        self.rules = list(rules)
        self.values = ["alpha_star", "alpha_star_lower", *(f"acc_{r}" for r in rules), *(f"gap_{r}" for r in rules)]
        self.groups: dict[tuple, dict[str, list[float]]] = {}  # key -> value -> [sum, count]
        self.hist: dict[tuple, np.ndarray] = {}  # (q_top_k, n, rule) -> counts over GAP_BINS (clipped)
        self.max_tail_bound = 0.0

    def _add(self, key: tuple, cols: dict[str, np.ndarray], mask: np.ndarray) -> None:
        group = self.groups.setdefault(key, {"pairs": [0.0, 0.0], **{v: [0.0, 0.0] for v in self.values}})
        group["pairs"][0] += float(mask.sum())
        for v in self.values:
            x = cols[v][mask]
            ok = np.isfinite(x)
            group[v][0] += float(x[ok].sum())
            group[v][1] += float(ok.sum())

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """Fold in one result table (numpy columns, long format of :func:`otlp.sweep.compute.compute_block`)."""
        if not len(cols["n"]):
            return
        bound = cols["alpha_star"] - cols["alpha_star_lower"]
        self.max_tail_bound = max(self.max_tail_bound, float(np.max(bound)))
        bucket = np.searchsorted(np.asarray(ENTROPY_EDGES[1:-1]), cols["entropy_bits"], side="right")
        for k in np.unique(cols["q_top_k"]):
            for n in np.unique(cols["n"]):
                base = (cols["q_top_k"] == k) & (cols["n"] == n)
                self._add((int(k), int(n), "all", 0), cols, base)
                for d in np.unique(cols["depth"][base]):
                    self._add((int(k), int(n), "depth", int(d)), cols, base & (cols["depth"] == d))
                for e in np.unique(bucket[base]):
                    self._add((int(k), int(n), "entropy", int(e)), cols, base & (bucket == e))
                for r in self.rules:
                    gap = cols[f"gap_{r}"][base]
                    gap = np.clip(gap[np.isfinite(gap)], GAP_BINS[0], GAP_BINS[-1])
                    counts = np.histogram(gap, GAP_BINS)[0]
                    key = (int(k), int(n), r)
                    self.hist[key] = self.hist.get(key, 0) + counts

    def summary(self) -> dict:
        """JSON-able: ``{"by_n": [...], "by_depth": [...], "by_entropy": [...]}``, each row a dict with q_top_k, n,
        the group, ``pairs``, and the mean of alpha*, alpha*_lower, every acceptance and gap (None where no pair
        has a value: a skipped rule)."""
        out: dict[str, list] = {"by_n": [], "by_depth": [], "by_entropy": []}
        for (k, n, kind, g), group in sorted(self.groups.items()):
            row: dict = {"q_top_k": k, "n": n, "pairs": int(group["pairs"][0])}
            if kind == "depth":
                row["depth"] = g
            elif kind == "entropy":
                row["entropy_bits"] = entropy_label(g)
            for v in self.values:
                total, count = group[v]
                row[v] = total / count if count else None
            out["by_n" if kind == "all" else f"by_{kind}"].append(row)
        return out


def scheme_of(rule: str) -> str:
    """The draft scheme a rule's acceptance is computed for (``get(rule).scheme``)."""
    from otlp.verifiers import get

    return str(get(rule).scheme)


def _fmt(x: object, width: int = 8) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:{width}.4f}"


def format_table(report: dict) -> str:
    """The terminal table of a sweep report (see :func:`otlp.sweep.runner.run_sweep`)."""
    rules = report["verifiers"]
    cap = report["capture"]
    storage = f"sparse top-{cap['top_k']}" if cap["storage"] == "sparse" else "dense"
    lines = [f"sweep of {cap['rows']} (p, q) pairs from {cap['path']} ({storage}, V = {cap['V']}), "
             f"{report['shards']} shards: {report['computed']} computed, {report['reused']} reused, "
             f"{report['seconds']:.1f} s"]
    summary = report["summary"]
    head_rules = "".join(f"{r[:8]:>9}" for r in rules)
    for k in report["q_top_ks"]:
        label = "q untruncated" if k == 0 else f"q top-{k}"
        rows = [r for r in summary["by_n"] if r["q_top_k"] == k]
        lines += ["", f"mean acceptance by n ({label}; rules with their own draft schemes)",
                  f"{'n':>3} {'pairs':>7} {'alpha*':>9}{head_rules}"]
        for r in rows:
            lines.append(f"{r['n']:>3} {r['pairs']:>7} {_fmt(r['alpha_star'], 9)}"
                         + "".join(" " + _fmt(r[f'acc_{x}']) for x in rules))
        if rules:
            lines += [f"mean gap alpha* - rule by n ({label})", f"{'n':>3} {'pairs':>7} {'':>9}{head_rules}"]
            for r in rows:
                lines.append(f"{r['n']:>3} {r['pairs']:>7} {'':>9}" + "".join(" " + _fmt(r[f'gap_{x}'])
                                                                          for x in rules))
        n_max = max(report["n"])
        for kind, col, title in (("by_depth", "depth", "depth"), ("by_entropy", "entropy_bits", "entropy of p")):
            grows = [r for r in summary[kind] if r["q_top_k"] == k and r["n"] == n_max]
            lines += [f"mean gap by {title} at n = {n_max} ({label})",
                      f"{title:>12} {'pairs':>7} {'alpha*':>9}{head_rules}"]
            for r in grows:
                lines.append(f"{str(r[col]):>12} {r['pairs']:>7} {_fmt(r['alpha_star'], 9)}"
                             + "".join(" " + _fmt(r[f'gap_{x}']) for x in rules))
    if cap["storage"] == "sparse":
        lines.append(f"\nsparse capture: alpha* is exact to within the tail-mass bound, at most "
                     f"{report['max_tail_bound']:.2e} here (column alpha_star_lower); rule acceptances are those of "
                     "the collapsed pair")
    for name, cells in report["skipped"].items():
        ns = ",".join(str(n) for n in sorted(int(n) for n in cells))
        lines.append(f"skipped {name} at n = {ns}: {next(iter(cells.values()))}")
    for name, (count, message) in report["errors"].items():
        lines.append(f"refused {name} on {count} pairs (NaN in the results), e.g.: {message}")
    return "\n".join(lines)


def plot(report: dict, hist: dict, out: Path) -> list[str]:
    """Two PNGs under ``out``: ``sweep_acceptance.png`` (alpha* and each rule's mean acceptance against n, one panel
    per draft top-k; a colour per rule, the n it skips named in its legend entry) and ``sweep_gaps.png``
    (:func:`gap_figure`: each rule's gap distribution, a colour per n). Returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("matplotlib", "the sweep plots", "sweep") from None
    rules, ks, ns = report["verifiers"], report["q_top_ks"], report["n"]
    by_n = report["summary"]["by_n"]
    cap = report["capture"]
    title = f"{cap['rows']} pairs, V = {cap['V']}"
    fig, axes = plt.subplots(1, len(ks), figsize=(5.2 * len(ks), 3.8), dpi=100, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        rows = {r["n"]: r for r in by_n if r["q_top_k"] == k}
        ax.plot(ns, [rows[n]["alpha_star"] for n in ns], "k-o", lw=2.2, label="alpha* (optimal, i.i.d.)")
        for j, r in enumerate(rules):  # a colour per rule, the same in every panel, whatever is skipped
            ys = [rows[n][f"acc_{r}"] for n in ns]
            xs = [n for n, y in zip(ns, ys, strict=True) if y is not None]
            gone = [str(n) for n, y in zip(ns, ys, strict=True) if y is None]
            label = f"{r} ({scheme_of(r)}" + (f"; skipped n = {', '.join(gone)})" if gone else ")")
            if xs:
                ax.plot(xs, [y for y in ys if y is not None], marker="o", ms=3.5, color=f"C{j % 10}", label=label)
            else:
                ax.plot([], [], " ", label=f"{r}: skipped for every n")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("drafts n")
        ax.set_ylabel("mean acceptance")
        ax.set_title(f"{title}, " + ("q untruncated" if k == 0 else f"q top-{k}"), fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    paths = [out / "sweep_acceptance.png"]
    fig.savefig(paths[0])
    plt.close(fig)
    fig = gap_figure(report, hist, plt)
    paths.append(out / "sweep_gaps.png")
    fig.savefig(paths[1])
    plt.close(fig)
    return [str(p) for p in paths]


def _short_reason(reason: str) -> str:
    """A skip reason short enough for a panel (the full text is in the report's ``skipped``)."""
    return "over --max-enum-cells" if reason.startswith("exact acceptance enumerates") else reason


def gap_panels(report: dict, hist: dict) -> list[dict]:
    """What ``sweep_gaps.png`` draws, one dict per rule: ``rule``, ``lines`` (``(n, colour, fractions over
    GAP_BINS)``) and ``note`` (the n that have no curve and why, or ""). Each n has one colour in every panel
    (``C0``, ``C1``, ... in the order of ``report["n"]``): a rule defined for n = 2 only is drawn in n = 2's
    colour."""
    rules, ns, k = report["verifiers"], report["n"], report["q_top_ks"][0]
    skipped = report.get("skipped", {})
    colour = {n: f"C{j}" for j, n in enumerate(ns)}
    panels = []
    for r in rules:
        lines, missing = [], {}
        for n in ns:
            counts = hist.get((k, n, r))
            if counts is None or not np.sum(counts):
                reason = skipped.get(r, {}).get(str(n)) or skipped.get(r, {}).get(n) or "no pairs with a value"
                missing.setdefault(_short_reason(reason), []).append(n)
                continue
            lines.append((n, colour[n], counts / np.sum(counts)))
        note = "; ".join(f"n = {', '.join(map(str, skip))}: {'skipped, ' if lines else 'skipped for every n, '}{why}"
                         for why, skip in missing.items())
        panels.append({"rule": r, "lines": lines, "note": note})
    return panels


def gap_figure(report: dict, hist: dict, plt) -> object:  # noqa: ANN001 - matplotlib.pyplot; -> Figure
    """``sweep_gaps.png``'s figure: a panel per rule (:func:`gap_panels`), one legend for all panels (a colour per
    n), and a note in every panel that lacks some n (a rule defined for n = 2 only, one over --max-enum-cells)."""
    from matplotlib.lines import Line2D

    rules, ns, k = report["verifiers"], report["n"], report["q_top_ks"][0]
    cap = report["capture"]
    title = f"{cap['rows']} pairs, V = {cap['V']}"
    cols = max(1, min(4, len(rules)))
    nrows = max(1, math.ceil(len(rules) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 2.6 * nrows + 0.5), dpi=100, squeeze=False)
    centers = 0.5 * (GAP_BINS[1:] + GAP_BINS[:-1])
    panels = gap_panels(report, hist)
    for i, ax in enumerate(axes.ravel()):
        if i >= len(panels):
            ax.axis("off")
            continue
        panel = panels[i]
        for n, colour, fractions in panel["lines"]:
            ax.step(centers, fractions, where="mid", color=colour, label=f"n = {n}")
        if panel["note"]:
            ax.text(0.97, 0.95, textwrap.fill(panel["note"], 34), transform=ax.transAxes, ha="right", va="top",
                    fontsize=6.5, color="0.35")
        ax.set_title(f"gap alpha* - {panel['rule']}", fontsize=9)
        ax.set_xlim(-0.1, 0.5)
        ax.grid(True, alpha=0.3)
        if i % cols == 0:
            ax.set_ylabel("fraction of pairs")
    handles = [Line2D([], [], color=f"C{j}", label=f"n = {n}") for j, n in enumerate(ns)]
    fig.legend(handles=handles, loc="lower center", ncol=len(ns), fontsize=7, frameon=False)
    fig.suptitle(f"gap distributions ({title}, " + ("q untruncated)" if k == 0 else f"q top-{k})"), fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
