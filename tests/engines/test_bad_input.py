"""Bad input gets a one-line InputError naming the argument; with validation off nothing reads a tensor's values
(no host read of a value: ``bool`` / ``item`` / ``tolist`` / ``int`` / ``float`` of a tensor is recorded and
refused while the adapters run)."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from otlp.core.errors import InputError
from otlp.engines import flashinfer, sglang, vllm
from otlp.verifiers.base import validation

from .helpers import dyadic_rows, tree_batch


def _vllm_args(g):
    V, num = 9, [2, 0, 3]
    T = sum(num)
    return dict(draft_token_ids=torch.randint(0, V, (T,), generator=g), num_draft_tokens=num, max_spec_len=3,
                cu_num_draft_tokens=torch.tensor(num).cumsum(0), draft_probs=dyadic_rows(g, (T,), V),
                target_probs=dyadic_rows(g, (T,), V), bonus_token_ids=torch.zeros(3, 1, dtype=torch.long))


def _fi_args(g):
    B, n, V = 3, 2, 9
    return dict(draft_probs=dyadic_rows(g, (B, n), V), draft_token_ids=torch.randint(0, V, (B, n), generator=g),
                target_probs=dyadic_rows(g, (B, n + 1), V))


def _sg_args(g):
    bs, N, V = 2, 5, 9
    nt, ns, depth = tree_batch(g, bs, N)
    S = int(depth.max()) + 1
    return dict(predicts=torch.full((bs * N,), -1, dtype=torch.int32), accept_index=torch.full((bs, S), -1,
                dtype=torch.int32), accept_token_num=torch.zeros(bs, dtype=torch.int32),
                candidates=torch.randint(0, V, (bs, N), generator=g), retrive_index=torch.arange(bs * N).reshape(bs, N),
                retrive_next_token=nt, retrive_next_sibling=ns, uniform_samples=torch.rand(bs, N, generator=g),
                uniform_samples_for_final_sampling=torch.rand(bs, generator=g),
                target_probs=dyadic_rows(g, (bs, N), V), draft_probs=dyadic_rows(g, (bs, N), V))


CASES = [
    # (adapter, builder, mutation, the argument the message must name)
    (vllm.rejection_sample, _vllm_args, lambda a: a.update(num_draft_tokens=[2, 1, 3]), "num_draft_tokens"),
    (vllm.rejection_sample, _vllm_args, lambda a: a.update(cu_num_draft_tokens=torch.tensor([2, 3, 5])),
     "cu_num_draft_tokens"),
    (vllm.rejection_sample, _vllm_args, lambda a: a["draft_token_ids"].__setitem__(0, 9), "draft_token_ids"),
    (vllm.rejection_sample, _vllm_args, lambda a: a.update(draft_token_ids=a["draft_token_ids"].float()),
     "draft_token_ids"),
    (vllm.rejection_sample, _vllm_args, lambda a: a.update(draft_probs=a["draft_probs"].double()[:, :-1]),
     "draft_probs"),
    (vllm.rejection_sample, _vllm_args, lambda a: a.update(max_spec_len=2), "max_spec_len"),
    (vllm.rejection_sample, _vllm_args, lambda a: a["target_probs"].mul_(2), "target_probs"),
    (flashinfer.chain_speculative_sampling, _fi_args, lambda a: a["draft_token_ids"].__setitem__((0, 0), -1),
     "draft_token_ids"),
    (flashinfer.chain_speculative_sampling, _fi_args, lambda a: a.update(target_probs=a["target_probs"][:, :2]),
     "draft_probs"),
    (flashinfer.chain_speculative_sampling, _fi_args, lambda a: a["draft_probs"].__setitem__((0, 0, 0), float("nan")),
     "draft_probs"),
    (flashinfer.chain_speculative_sampling, _fi_args,
     lambda a: a.update(maybe_output_accepted_token_num=torch.zeros(3)), "maybe_output_accepted_token_num"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a["candidates"].__setitem__((0, 1), 99), "candidates"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a["retrive_next_token"].__setitem__((0, 0), 7),
     "retrive_next_token"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a.update(predicts=a["predicts"].float()), "predicts"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a.update(uniform_samples=a["uniform_samples"][:, :2]),
     "uniform_samples"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a["uniform_samples"].__setitem__((0, 0), 2.0),
     "uniform_samples"),
    (sglang.tree_speculative_sampling, _sg_args, lambda a: a.update(accept_index=a["accept_index"].long()[:1]),
     "accept_index"),
]


@pytest.mark.parametrize("adapter, build, mutate, name", CASES)
def test_one_line_input_error_naming_the_argument(adapter, build, mutate, name):
    args = build(torch.Generator().manual_seed(0))
    mutate(args)
    with pytest.raises(InputError) as err:
        adapter(**args)
    message = str(err.value)
    assert "\n" not in message and name in message


def test_bad_method_and_device():
    args = _fi_args(torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match="method"):
        flashinfer.chain_speculative_sampling(**args, method="spechub")
    args["draft_probs"] = args["draft_probs"].to("meta")
    with pytest.raises(InputError, match="draft_probs"):
        flashinfer.chain_speculative_sampling(**args)


class _NoValueReads(TorchFunctionMode):
    """Refuses every read of a tensor value on the host while active."""

    READS = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__,
             torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.cpu}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            raise AssertionError(f"a value was read with validation off: {func.__name__}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_validation_off_reads_no_values(method, monkeypatch):
    """With validation off (and max_children given to the tree) the adapters run without reading a value; the
    optimal rule's CPU route reads its rows on the host by design, so this checks the rrs route end to end and the
    optimal route up to the rule."""
    g = torch.Generator().manual_seed(1)
    if method == "optimal":
        import otlp.engines._common as common

        monkeypatch.setattr(common, "chain_optimal", lambda p, q, x, c, f: (c < 0.5, x.long()))
    fi, fu = _fi_args(g), torch.rand(3, 4, generator=g)
    args = _sg_args(g)
    chain = dict(args, accept_index=torch.full((2, 5), -1, dtype=torch.int32), retrive_next_token=None,
                 retrive_next_sibling=None, uniform_samples=args["uniform_samples"][:, :4],
                 draft_probs=args["draft_probs"][:, :4])
    va, vu = _vllm_args(g), torch.rand(5, dtype=torch.float64, generator=g)
    tree = _sg_args(g)
    with validation(False), _NoValueReads():
        flashinfer.chain_speculative_sampling(**fi, uniforms=fu, method=method)
        sglang.chain_speculative_sampling(**chain, method=method)
        vllm.rejection_sample(**va, uniform_probs=vu, exponentials=torch.ones(3, 9), method="rrs")
        sglang.tree_speculative_sampling(**tree, max_children=3, method="rrs")
    # the same bad value that validation catches passes unread with validation off
    bad = _fi_args(g)
    bad["draft_token_ids"][0, 0] = 5
    bad["target_probs"][0, 0, 0] = 3.0
    with validation(False):
        flashinfer.chain_speculative_sampling(**bad)
    with pytest.raises(InputError):
        flashinfer.chain_speculative_sampling(**bad)


def test_a_leafs_unread_draft_row_cannot_push_the_draw_out_of_the_vocabulary():
    """SGLang's draft_probs rows of childless nodes are scratch, never validated: a NaN there (an uninitialised
    buffer) entered the rrs leaf's draw through a 0 * q and gave token V (found by tests/fuzz/test_fuzz_engines.py)."""
    import torch

    from otlp.engines import sglang

    next_token = torch.tensor([[1, -1, 3, -1]])  # root -> 1, 2 (siblings); 2 -> 3
    next_sibling = torch.tensor([[-1, 2, -1, -1]])
    p = torch.ones(1, 4, 1)
    q = torch.tensor([[[1.0], [float("nan")], [1.0], [float("nan")]]])  # the leaves' rows (1 and 3) are NaN
    for method in ("rrs", "rrs_wor", "optimal"):
        predicts = torch.full((4,), -7, dtype=torch.int32)
        accept_index = torch.full((1, 3), -7, dtype=torch.int32)
        accept_num = torch.full((1,), -7, dtype=torch.int32)
        sglang.tree_speculative_sampling(predicts, accept_index, accept_num, torch.zeros(1, 4, dtype=torch.long),
                                         torch.arange(4).view(1, 4), next_token, next_sibling,
                                         torch.full((1, 4), 0.9), torch.tensor([0.786]), p, q, method=method)
        assert accept_num.tolist() == [1] and predicts.tolist() == [0, 0, -7, -7], method
