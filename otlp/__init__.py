"""otlp: optimal multi-draft speculative sampling.

The public API is kept short; everything else lives in the subpackages (``otlp.formulations``,
``otlp.solvers``, ``otlp.optimal``, ``otlp.verifiers``, ``otlp.proofs_check``, ``otlp.decode``).
"""

from otlp.drafts import IID, Greedy, Independent, Joint, SpecHub, WithoutReplacement
from otlp.errors import InputError, MissingDependencyError, ModelTooLargeError
from otlp.subsets import optimal_acceptance

__all__ = [
    "IID",
    "Greedy",
    "Independent",
    "InputError",
    "Joint",
    "MissingDependencyError",
    "ModelTooLargeError",
    "SpecHub",
    "WithoutReplacement",
    "optimal_acceptance",
]
__version__ = "0.1.0"
