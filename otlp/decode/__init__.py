"""otlp.decode: language models (embedded Kneser–Ney n-grams, Hugging Face adapter) and the speculative decode loop.

>>> from otlp.decode import decode, embedded_models
>>> pair = embedded_models()                       # bigram draft, 4-gram target, V = 2000, trained in ~1 s
>>> result = decode(pair.draft, pair.target, "rrs", n=2, L=4, max_new_tokens=16, seed=0)
>>> len(result.tokens[0]), 1.0 <= result.metrics.block_efficiency <= 5.0
(16, True)
"""

from otlp.decode.acceptance import acceptance_sweep, iid_optimal_acceptance, run_acceptance, top_k_draft
from otlp.decode.hf import HFCausalLM
from otlp.decode.loop import DecodeMetrics, DecodeResult, decode, sample_target
from otlp.decode.metrics import compare_token_laws
from otlp.decode.models import LanguageModel
from otlp.decode.ngram import EmbeddedModels, KneserNeyLM, embedded_models
from otlp.decode.registry import available_verifiers, resolve_verifier

__all__ = [
    "DecodeMetrics",
    "DecodeResult",
    "EmbeddedModels",
    "HFCausalLM",
    "KneserNeyLM",
    "LanguageModel",
    "acceptance_sweep",
    "available_verifiers",
    "compare_token_laws",
    "decode",
    "embedded_models",
    "iid_optimal_acceptance",
    "resolve_verifier",
    "run_acceptance",
    "sample_target",
    "top_k_draft",
]
