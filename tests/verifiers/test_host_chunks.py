"""On the host the row-wise passes of rrs, rrs_wor and K-SEQ run in chunks of rows (otlp.core.xp.row_chunks): every
chunking must give the tokens and accepted indices of the whole batch at once, for the same generator state (V =
5000: K-SEQ's two-stage rho*, whose inner sums may round apart by an ulp between chunkings: a token moves only if a
uniform falls within that ulp of a threshold, about 1e-7 per draw in float32)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from otlp.core import xp  # noqa: E402
from otlp.verifiers import get  # noqa: E402


def _inputs(B: int, V: int, n: int, seed: int = 0):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    iid = torch.multinomial(q, n, replacement=True, generator=g)
    wor = torch.multinomial(q, n, replacement=False, generator=g)
    return p, q, iid, wor


@pytest.mark.parametrize("name", ["rrs", "rrs_wor", "kseq"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_chunked_rows_sample_what_the_whole_batch_samples(name: str, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    B, V = 9, 5000
    p, q, iid, wor = _inputs(B, V, n)
    drafts = wor if name == "rrs_wor" else iid
    verifier = get(name)
    monkeypatch.setattr(xp, "HOST_CHUNK", B * V)  # one chunk: the whole batch
    assert len(xp.row_chunks(p)) == 1
    whole = verifier.sample(p, q, drafts, torch.Generator().manual_seed(5))
    for rows in (1, 4):
        monkeypatch.setattr(xp, "HOST_CHUNK", rows * V)
        assert len(xp.row_chunks(p)) == -(-B // rows)
        chunked = verifier.sample(p, q, drafts, torch.Generator().manual_seed(5))
        assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])
