"""otlp.core: the maths every other layer stands on, with no speed machinery.

``errors`` (the error types), ``distributions`` (checks, logits to probabilities), ``drafts`` (the draft schemes),
``psi`` and ``subsets`` (psi(H) and alpha* = 1 + min psi), ``psi_wor`` (alpha* for drafts without replacement),
``xp`` (the array operations written once for numpy and torch) and ``_lazy`` (lazy package exports).
"""
