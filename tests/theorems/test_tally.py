"""Tally keeps the worst violation of one instance; a NaN comparison must count as a failure."""

from __future__ import annotations

import math

from otlp.theorems.core import Tally


def test_nan_counts_as_the_worst_violation():
    t = Tally()
    t.equal("a", 0.5, 0.5)
    t.equal("b", float("nan"), 0.5)
    t.equal("c", 0.5, 0.25)
    assert math.isinf(t.worst) and t.note.startswith("b")


def test_worst_of_finite_values():
    t = Tally()
    t.equal("a", 1.0, 0.75)
    t.equal("b", 1.0, 0.5)
    assert t.worst == 0.5 and t.note.startswith("b")
