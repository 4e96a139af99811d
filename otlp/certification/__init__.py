"""otlp.certification: does a verification rule preserve the target, and how far is it from alpha*?

``rule`` (``certify``: a registered rule exactly, or any sampler by a sequential test; ``otlp certify``),
``blackbox`` (the sequential test on any sampler function), ``stats`` (its KL confidence band, docs/CERTIFY.md).
The two other certificates live with what they check: ``otlp.lp.solution.Solution.certificate()`` (an LP answer)
and ``otlp.multistep.certify_multistep`` (a multi-step rule, ``otlp certify-block``).
"""
