"""Example: turn a plain ``.npz`` of (p, q) arrays from any engine into a capture that ``otlp sweep`` reads.

    python -m otlp.sweep.npz_example pairs.npz my_capture [--storage dense] [--top-k 256]
    otlp sweep my_capture

The ``.npz`` holds ``p`` and ``q`` (float, ``[M, V]``: the target and draft laws at M verification nodes) and may
hold per-node ``depth``, ``context_id`` (ints, ``[M]``) and ``temperature`` (float, ``[M]``). The whole program is
:func:`convert`: a :class:`~otlp.sweep.capture.CaptureWriter` fed block by block.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from otlp.core.errors import InputError

#: Rows handed to the writer at a time (bounds the float64 copies for V = 152k to about 1 GiB).
BLOCK = 1024
OPTIONAL = ("depth", "context_id", "temperature")


def convert(npz: str | Path, out: str | Path, *, storage: str = "sparse", top_k: int = 256) -> int:
    """Write the capture ``out`` from ``npz``; returns the number of pairs written."""
    from otlp.sweep import CaptureWriter

    try:
        data = np.load(npz, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{str(npz)!r} is not a readable .npz file ({exc})") from None
    if "p" not in data or "q" not in data:
        raise InputError(f"{str(npz)!r} must hold arrays named p and q, found {', '.join(data.files) or 'none'}")
    p, q = data["p"], data["q"]  # [M, V] each
    if p.ndim != 2 or q.ndim != 2 or p.shape != q.shape:
        raise InputError(f"p and q must be arrays [M, V] of one shape, got {p.shape} and {q.shape}")
    extra = {name: data[name] for name in OPTIONAL if name in data}
    with CaptureWriter(out, p.shape[1], storage=storage, top_k=top_k,
                       provenance={"source": f"npz {Path(npz).name}"}) as writer:
        for start in range(0, p.shape[0], BLOCK):
            stop = min(p.shape[0], start + BLOCK)
            writer.add(p[start:stop], q[start:stop], **{k: v[start:stop] for k, v in extra.items()})
    return int(p.shape[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otlp.sweep.npz_example", description=__doc__.splitlines()[0])
    parser.add_argument("npz")
    parser.add_argument("out")
    parser.add_argument("--storage", choices=("sparse", "dense"), default="sparse")
    parser.add_argument("--top-k", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        rows = convert(args.npz, args.out, storage=args.storage, top_k=args.top_k)
    except InputError as exc:
        print(f"otlp: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {rows} pairs to {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
