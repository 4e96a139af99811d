"""Pure-torch ports of the engines' kernels, written line by line from their sources (one request at a time, as the
kernels' programs run), for the parity tests. Each takes its randomness as tensors.

* vLLM ``vllm/v1/sample/rejection_sampler.py``: ``rejection_greedy_sample_kernel``, ``rejection_random_sample_kernel``,
  ``sample_recovered_tokens_kernel``;
* FlashInfer ``include/flashinfer/sampling.cuh::ChainSpeculativeSampling`` (@fb28d724);
* SGLang ``python/sglang/kernels/ops/speculative/tree_sampling.py::_tree_speculative_sampling_target_only_kernel``
  and ``reject_sampling.py::speculative_sampling_classic_kernel``.
"""

from __future__ import annotations

import torch


def _sample_cdf(weights: torch.Tensor, target_u: float, positive_only: bool = True, last_valid: bool = True) -> int:
    """The kernels' inverse CDF on one row: the first index (of positive weight) whose running sum exceeds target_u;
    else the last index of positive weight (FlashInfer / SGLang tree), else V - 1."""
    V = weights.shape[0]
    cum = torch.tensor(0.0, dtype=weights.dtype)
    last = -1
    for i in range(V):
        w = weights[i]
        cum = cum + w
        if w > 0:
            last = i
        if cum > target_u and (w > 0 or not positive_only):
            return i
    return last if (last_valid and last >= 0) else V - 1


def vllm_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                          is_greedy, uniform_probs, exponentials):
    B = len(num_draft_tokens)
    out = torch.full((B, max_spec_len + 1), -1, dtype=torch.int32)
    start = 0
    for req in range(B):
        n = num_draft_tokens[req]
        rejected = False
        for pos in range(n):
            t = start + pos
            if rejected:
                break
            draft = int(draft_token_ids[t])
            if is_greedy[req]:
                arg = int(target_probs[t].argmax())
                out[req, pos] = arg
                rejected = draft != arg
                continue
            draft_prob = 1.0 if draft_probs is None else draft_probs[t, draft]
            target_prob = target_probs[t, draft]
            if draft_prob > 0 and target_prob / draft_prob >= uniform_probs[t]:
                out[req, pos] = draft
            else:
                rejected = True
                if draft_probs is None:
                    prob = target_probs[t].clone()
                    prob[draft] = 0
                else:
                    prob = torch.clamp(target_probs[t] - draft_probs[t], min=0)
                out[req, pos] = int((prob / exponentials[req]).argmax())
        if not rejected:
            out[req, n] = int(bonus_token_ids[req])
        start += n
    return out


def flashinfer_chain(draft_probs, draft_token_ids, target_probs, stream):
    B, n, V = draft_probs.shape
    out = torch.full((B, n + 1), -1, dtype=torch.int32)
    accepted_num = torch.zeros(B, dtype=torch.int32)
    emitted_num = torch.zeros(B, dtype=torch.int32)
    for row in range(B):
        draws = iter(stream[row])  # the Philox stream of this row, in order

        def uniform(draws=draws):
            return next(draws)

        pos = n
        for i in range(n):
            draft_id = int(draft_token_ids[row, i])
            q, p = target_probs[row, i, draft_id], draft_probs[row, i, draft_id]
            u = uniform()
            if u * p < q:
                out[row, i] = draft_id
            else:
                pos = i
                break
        accepted = pos
        for i in range(pos, n):
            draft_id = int(draft_token_ids[row, i])
            q, p = target_probs[row, i, draft_id], draft_probs[row, i, draft_id]
            if uniform() * p < q:
                accepted += 1
        accepted_num[row] += accepted
        emitted_num[row] += pos
        qrow = target_probs[row, pos]
        prow = draft_probs[row, pos] if pos != n else torch.zeros(V)
        relu = torch.clamp(qrow - prow, min=0)
        out[row, pos] = _sample_cdf(relu, uniform() * relu.sum())
    return out, accepted_num, emitted_num


def sglang_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index, next_token, next_sibling,
                       uniform_samples, finals, target_probs, draft_probs, threshold_single, threshold_acc):
    bs, N = candidates.shape
    S = accept_index.shape[1]
    V = target_probs.shape[2]
    safe_acc = max(threshold_acc, 1e-9)
    for b in range(bs):
        cur, row = 0, 0
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        num = 0
        coin = uniform_samples[b, 0]
        cont = True
        for _ in range(1, S):
            if not cont:
                break
            cur = int(next_token[b, cur])
            acc = torch.tensor(0.0)
            status = 0
            while status == 0:
                if cur == -1:
                    status = -1
                    break
                tok = int(candidates[b, cur])
                tp = target_probs[b, row, tok]
                acc = acc + tp
                if coin <= acc / safe_acc or tp >= threshold_single:
                    predicts[last] = tok
                    num += 1
                    accept_index[b, num] = int(retrive_index[b, cur])
                    last = int(retrive_index[b, cur])
                    row = cur
                    coin = uniform_samples[b, cur]
                    status = 1
                else:
                    draft_probs[b, row, tok] = tp
                    cur = int(next_sibling[b, cur])
            if status != 1:
                cont = False
        accept_token_num[b] = num
        if num == S - 1:
            res = target_probs[b, row].clone()
        else:
            res = torch.clamp(target_probs[b, row] - draft_probs[b, row], min=0)
        predicts[last] = _sample_cdf(res, finals[b] * res.sum())
    del V


def sglang_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, uniform_samples, finals,
                 target_probs, draft_probs):
    bs, N = candidates.shape
    for b in range(bs):
        row = 0
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        num = 0
        step = 1
        cont = True
        while step < N and cont:
            tok = int(candidates[b, step])
            p, q = target_probs[b, row, tok], draft_probs[b, row, tok]
            if uniform_samples[b, step - 1] * q < p:
                num += 1
                row = step
                predicts[last] = tok
                last = int(retrive_index[b, step])
                accept_index[b, num] = last
                step += 1
            else:
                cont = False
        accept_token_num[b] = num
        if cont:
            val = target_probs[b, row].clone()
        else:
            val = torch.clamp(target_probs[b, row] - draft_probs[b, row], min=0)
        predicts[last] = _sample_cdf(val, finals[b] * val.sum(), positive_only=False, last_valid=False)
