"""otlp/backend/triton.py: ``opaque`` keeps a function out of torch.compile's graphs (the Triton launches of the
optimal rule's route), and is the function itself when called eagerly."""

from __future__ import annotations

import numpy as np
import pytest

from otlp.backend.triton import opaque

torch = pytest.importorskip("torch")

calls: list[int] = []


def _numpy_double(x):  # noqa: ANN001, ANN202 - a body torch.compile cannot trace whole (numpy on the tensor's data)
    calls.append(1)
    return torch.from_numpy(np.asarray(x.numpy()) * 2.0)


def test_eager_calls_are_the_function() -> None:
    f = opaque(_numpy_double)
    assert f.__name__ == "_numpy_double"
    assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))


def test_under_compile_the_call_runs_between_two_graphs() -> None:
    f = opaque(_numpy_double)
    graphs = []

    def count(gm, example_inputs):  # noqa: ANN001, ANN202, ARG001 - a torch.compile backend
        graphs.append(gm)
        return gm.forward

    def route(x):  # noqa: ANN001, ANN202
        return f(x + 1.0) * 3.0

    torch._dynamo.reset()
    try:
        calls.clear()
        out = torch.compile(route, backend=count, dynamic=False)(torch.ones(4))
        assert torch.equal(out, torch.full((4,), 12.0))
        assert len(graphs) == 2  # x + 1, then * 3: the call itself in neither
        assert calls == [1]  # run once, never traced
    finally:
        torch._dynamo.reset()
