"""The model IR: blocks, COO rows -> CSR, bounds, split/flatten, sizes and refusals; FlowNetwork -> LP."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.lp.formulations.network_lp import network_to_linear
from otlp.lp.ir import FlowNetwork, LinearModel, ModelSize
from otlp.lp.solvers import solve


def small_model() -> LinearModel:
    m = LinearModel("small", sense="max")
    m.add_block("a", (2, 2), lower=0.0, upper=[[1, 2], [3, 4]])
    m.add_block("b", 3, lower=-1.0)
    m.set_objective("a", [[1, 0], [0, 1]])
    m.add_rows("sum", [0, 0, 1, 1], [0, 1, 4, 4], [1.0, 1.0, 2.0, 3.0], -np.inf, [1.0, 2.0])  # duplicate summed
    return m


def test_blocks_rows_and_vectors():
    m = small_model()
    assert m.num_variables == 7 and m.num_constraints == 2
    assert m.blocks["b"].slice == slice(4, 7)
    A = m.A.toarray()
    np.testing.assert_array_equal(A, [[1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 5, 0, 0]])
    np.testing.assert_array_equal(m.objective, [1, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(m.upper[:4], [1, 2, 3, 4])
    np.testing.assert_array_equal(m.lower[4:], [-1, -1, -1])
    np.testing.assert_array_equal(m.row_upper, [1, 2])
    assert m.size() == ModelSize(7, 2, 4)  # counted before summing duplicates: an upper bound


def test_split_and_flatten_round_trip():
    m = small_model()
    x = np.arange(7.0)
    parts = m.split(x)
    assert parts["a"].shape == (2, 2) and parts["b"].tolist() == [4, 5, 6]
    np.testing.assert_array_equal(m.flatten(parts), x)
    exact = {"a": np.array([[Fraction(1, 3)] * 2] * 2, dtype=object), "b": np.array([Fraction(0)] * 3, dtype=object)}
    assert m.flatten(exact).dtype == object
    assert m.split_rows(np.array([5.0, 6.0]))["sum"].tolist() == [5, 6]


def test_duplicate_names_and_bad_sense():
    m = small_model()
    with pytest.raises(InputError, match="already exists"):
        m.add_block("a", 1)
    with pytest.raises(InputError, match="already exists"):
        m.add_rows("sum", [0], [0], 1.0, 0.0, 1.0)
    with pytest.raises(InputError, match="sense"):
        LinearModel("x", sense="maximize")


def test_size_check_names_the_size():
    size = ModelSize(10**9, 10**6, 2 * 10**9)
    assert size.bytes > 4 * 1024**3
    with pytest.raises(ModelTooLargeError, match="1,000,000,000 variables") as info:
        size.check("a model")
    assert "GiB" in str(info.value)
    assert ModelSize(10, 5, 20).check("tiny") == ModelSize(10, 5, 20)


def test_network_to_linear_solves_a_known_max_flow():
    """s -> a (3), s -> b (2), a -> b (1), a -> t (2), b -> t (3): max flow 5 (cut {s -> a, s -> b})."""
    net = FlowNetwork("toy", 4, np.array([0, 0, 1, 1, 2]), np.array([1, 2, 2, 3, 3]),
                      np.array([3.0, 2.0, 1.0, 2.0, 3.0]), source=0, sink=3,
                      arc_blocks={"out": slice(0, 2), "mid": slice(2, 3), "in": slice(3, 5)})
    model = network_to_linear(net)
    assert set(model.blocks) == {"out", "mid", "in"}
    s = solve(net, "highs")
    assert s.value == pytest.approx(5.0)
    flow = np.concatenate([s.primal["out"], s.primal["mid"], s.primal["in"]])
    assert flow[:2].sum() == pytest.approx(5.0) and np.all(flow <= net.capacities + 1e-12)
    assert net.size() == ModelSize(5, 4, 10)
