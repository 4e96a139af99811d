"""otlp.engines: otlp's verification rules behind the serving engines' own verifier contracts.

One module per engine, each taking the engine's arguments by the engine's names, shapes and dtypes and writing its
outputs (in place where the engine does, with its -1 placeholders), with keyword-only extras ``method=`` (``"rrs"``
the engine's own rule, the default; ``"optimal"`` otlp's optimal rule; SGLang's trees also ``"rrs_wor"``,
``"optimal_wor"`` and ``"target_only"``) and explicit uniforms for bit-for-bit replay. Pure torch: no engine is
imported.

* :mod:`otlp.engines.vllm`: ``rejection_sample`` (vLLM V1's ragged chains);
* :mod:`otlp.engines.flashinfer`: ``chain_speculative_sampling``;
* :mod:`otlp.engines.sglang`: ``tree_speculative_sampling_target_only``, ``chain_speculative_sampling`` and
  ``tree_speculative_sampling`` (trees whose nodes carry real draft probabilities: what no engine verifies).

Swapping an engine's function for otlp's is one assignment (docs/ENGINES.md).
"""
