"""ortools and highspy in one process (SPEC.md: ortools 9.15 and highspy 1.15 each bundle HiGHS and clash; the
project pins highspy < 1.15). Each order of import runs in a fresh interpreter, and both libraries then solve."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

IMPORTS = {
    "highspy": "import highspy",
    "ortools": "from ortools.graph.python import max_flow\nfrom ortools.linear_solver import pywraplp",
}

SOLVE_BOTH = """
import numpy as np
import highspy
from ortools.graph.python import max_flow
from ortools.linear_solver import pywraplp

# highspy: max x + y s.t. x + 2y <= 4, 3x + y <= 6, x, y >= 0  (optimum 2.8 at x = 1.6, y = 1.2)
h = highspy.Highs()
h.setOptionValue("output_flag", False)
inf = highspy.kHighsInf
h.addVars(2, np.zeros(2), np.full(2, inf))
h.changeColsCost(2, np.arange(2, dtype=np.int32), np.array([-1.0, -1.0]))
h.addRows(2, np.full(2, -inf), np.array([4.0, 6.0]), 4, np.array([0, 2], dtype=np.int32),
          np.array([0, 1, 0, 1], dtype=np.int32), np.array([1.0, 2.0, 3.0, 1.0]))
h.run()
assert abs(-h.getInfo().objective_function_value - 2.8) < 1e-9

# ortools max flow through otlp's backend, and ortools' own bundled HiGHS-free LP (GLOP)
from otlp.lp.ir import FlowNetwork
from otlp.lp.solvers import solve
net = FlowNetwork("n", 3, np.array([0, 1]), np.array([1, 2]), np.array([0.75, 0.5]), 0, 2,
                  arc_blocks={"f": slice(0, 2)})
assert solve(net, "ortools").value == 0.5
smf = max_flow.SimpleMaxFlow()
smf.add_arc_with_capacity(0, 1, 3)
assert smf.solve(0, 1) == smf.OPTIMAL and smf.optimal_flow() == 3
lp = pywraplp.Solver.CreateSolver("GLOP")
x = lp.NumVar(0, 1, "x")
lp.Maximize(x)
assert lp.Solve() == lp.OPTIMAL and abs(x.solution_value() - 1) < 1e-12
print("ok")
"""


@pytest.mark.parametrize("first", ["highspy", "ortools"])
def test_highspy_and_ortools_share_a_process(first):
    second = "ortools" if first == "highspy" else "highspy"
    script = IMPORTS[first] + "\n" + IMPORTS[second] + "\n" + textwrap.dedent(SOLVE_BOTH)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_installed_highspy_respects_the_pin():
    from importlib.metadata import version

    major, minor = (int(x) for x in version("highspy").split(".")[:2])
    assert (major, minor) < (1, 15), "highspy >= 1.15 cannot share a process with ortools 9.15 (SPEC.md)"
