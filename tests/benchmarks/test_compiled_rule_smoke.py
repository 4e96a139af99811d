"""benchmarks/compiled_rule.py: its eager count on meta tensors runs for both kinds of passes (the compile itself,
minutes on this CPU, is the script's run, not a test's)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compiled_rule.py"


@pytest.fixture(scope="module")
def cr():
    sys.path.insert(0, str(SCRIPT.parent))  # (its sibling scripts, as when it runs)
    try:
        spec = importlib.util.spec_from_file_location("compiled_rule_bench", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_eager_bytes_of_both_passes(cr):
    got = {name: cr.eager_bytes(4, 3000, 2, functools.partial(cr._rule, passes=passes))
           for name, passes in cr.PASSES.items()}
    for floors, ops in got.values():
        assert floors > 1.0 and ops > 100
    # one read of p and q a pass (the Triton route's) moves less than torch's passes, which compare every token
    assert got["one-read"][0] < got["torch"][0]
