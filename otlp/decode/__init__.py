"""otlp.decode: language models (embedded Kneser–Ney n-grams, Hugging Face adapter) and the speculative decode loop.

>>> from otlp.decode import decode, embedded_models
>>> pair = embedded_models()                       # bigram draft, 4-gram target, V = 2000, trained in ~1 s
>>> result = decode(pair.draft, pair.target, "rrs", n=2, L=4, max_new_tokens=16, seed=0)
>>> len(result.tokens[0]), 1.0 <= result.metrics.block_efficiency <= 5.0
(16, True)
"""

from otlp.core._lazy import lazy_exports

#: public name -> submodule; loaded on first use, so importing otlp.decode (and `otlp decode`'s argument checks) does
#: not import torch
_EXPORTS = {
    "acceptance_sweep": "acceptance", "iid_optimal_acceptance": "acceptance", "run_acceptance": "acceptance",
    "top_k_draft": "acceptance", "HFCausalLM": "hf", "DecodeMetrics": "loop", "DecodeResult": "loop",
    "decode": "loop", "sample_target": "loop", "compare_token_laws": "metrics", "LanguageModel": "models",
    "EmbeddedModels": "ngram", "KneserNeyLM": "ngram", "embedded_models": "ngram",
    "available_verifiers": "registry", "resolve_verifier": "registry",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()}, globals())
