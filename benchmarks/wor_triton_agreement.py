"""``get("optimal_wor")``'s Triton route against its torch route and its host route, token for token (issue 45).

The Triton route is the torch route with the plan's Newton steps in one Triton program per row
(otlp/optimal/wor_triton.py); it is the route on CUDA. Here, on LM-like float32 rows (p = softmax(5 z), a close draft
softmax(log p + sigma z') filtered to its top k tokens, n drafts without replacement, seeded uniforms), each point's
rows go through the three routes with the same uniforms, and the script prints how many tokens or slots differ, and
the largest gap between the kernel's plan and ``set_plan``'s on those rows. Without CUDA the kernel runs under
``TRITON_INTERPRET=1`` (slow: a few seconds a row at C(k, n) ~ 1,000 sets), so the default grid is small.

    python benchmarks/wor_triton_agreement.py                    # V = 32k, k = 10 / 20 / 50, n = 2 to 4
    python benchmarks/wor_triton_agreement.py --rows 16 --points 10x2 10x3 20x4
"""

from __future__ import annotations

import argparse
import os
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, default=32768)
    ap.add_argument("--rows", type=int, default=32, help="rows per point")
    ap.add_argument("--points", nargs="+", default=["10x2", "10x3", "10x4", "20x2", "20x3", "50x2"],
                    help="k x n: the draft's support size and the drafts a row")
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.5, 1.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # (read when the kernel is made, on first use)
    from otlp.core.drafts import combinations, set_probabilities
    from otlp.optimal import wor as W
    from otlp.verifiers import get

    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(args.seed)
    v = get("optimal_wor")
    print(f"V = {args.V:,}, {args.rows} rows a point, device {device}"
          + ("" if device == "cuda" else " (the kernel interpreted)"))
    print("| k | n | sigma | rows | triton vs torch: differ | triton vs host: differ | max plan gap | s |")
    print("|---|---|---|---|---|---|---|---|")
    total = differ = 0
    for point in args.points:
        k, n = (int(x) for x in point.split("x"))
        for sigma in args.sigma:
            start = time.perf_counter()
            B, V = args.rows, args.V
            p = torch.softmax(5 * torch.randn(B, V, generator=g, dtype=torch.float64), 1)
            q = torch.softmax(torch.log(p) + sigma * torch.randn(B, V, generator=g, dtype=torch.float64), 1)
            top = torch.topk(q, k, dim=1).indices
            q = torch.zeros_like(q).scatter_(1, top, q.gather(1, top))
            q = q / q.sum(1, keepdim=True)
            keys = torch.log(q) - torch.log(-torch.log(torch.rand(q.shape, generator=g, dtype=torch.float64)))
            drafts = torch.topk(keys, n, dim=1).indices
            u = torch.rand(B, 2, generator=g, dtype=torch.float64)
            p, q, drafts, u = p.float().to(device), q.float().to(device), drafts.to(device), u.to(device)
            got = v.sample(p, q, drafts, uniforms=u, backend="triton", top_k=k)
            torch_route = v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=k)
            host = v.sample(p.cpu(), q.cpu(), drafts.cpu(), uniforms=u.cpu(), backend="host")
            bad_torch = int(((got[0] != torch_route[0]) | (got[1] != torch_route[1])).sum())
            bad_host = int(((got[0].cpu() != host[0]) | (got[1].cpu() != host[1])).sum())
            # the two plans on the rows' supports (each row's k tokens and OTHER)
            live = torch.topk(q, k, dim=1, sorted=False).indices.sort(1).values
            pl = p.gather(1, live).double() / p.double().sum(1, keepdim=True)
            ql = q.gather(1, live).double() / q.double().sum(1, keepdim=True)
            p1 = torch.cat([pl, (1 - pl.sum(1, keepdim=True)).clamp(min=0)], 1)
            q1 = torch.cat([ql, torch.zeros_like(ql[:, :1])], 1)
            sets = torch.from_numpy(combinations(k, n)).to(device)
            probs = set_probabilities(q1, sets)
            _, c_torch, _ = W.set_plan(p1, q1, sets, probs)
            _, c_kernel, _ = W.set_plan(p1, q1, sets, probs, kernel=True)
            gap = float((c_torch - c_kernel).abs().max())
            total += B
            differ += bad_torch + bad_host
            print(f"| {k} | {n} | {sigma} | {B} | {bad_torch} | {bad_host} | {gap:.1e} | "
                  f"{time.perf_counter() - start:.0f} |", flush=True)
    print(f"\n{total} rows, {differ} outputs that differ")
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
