"""The package's layering: no import cycle, the LP IR on the ground floor, torch only in the samplers and the
decode loop, and a core-only install (no torch, tqdm, matplotlib, transformers, solver extras) that imports and
collects its tests cleanly."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "otlp"

#: modules allowed to need torch at import time: the batched samplers' multi-step laws and the decode loop
TORCH_MODULES = ("otlp.decode", "otlp.multistep.bv", "otlp.multistep.certify", "otlp.multistep.enumeration",
                 "otlp.multistep.from_lm", "otlp.multistep.gbv", "otlp.multistep.optimal_block",
                 "otlp.multistep.optimal_rule", "otlp.multistep.simulate", "otlp.multistep.token_wise")

BLOCK = """
import importlib, pkgutil, sys
BLOCKED = {"torch", "tqdm", "matplotlib", "transformers", "cvxpy", "pulp", "ortools", "ot"}
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Block())
"""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, lazy: bool) -> list[str]:
    """otlp modules named by import statements: at module level (what runs at import time; ``if TYPE_CHECKING``
    blocks excluded), or anywhere (``lazy``: function-level imports too)."""
    out = []
    nodes = ast.walk(tree) if lazy else tree.body
    skip = {id(n) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
            for n in ast.walk(n)}
    for node in nodes:
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return [name for name in out if name.startswith("otlp")]


def _graph(lazy: bool) -> dict[str, set[str]]:
    """module -> otlp modules it imports, with the package ``__init__`` each import executes (not its own)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for name in _imports(ast.parse(path.read_text()), lazy):
            parts = name.split(".")
            for k in range(2, len(parts) + 1):
                target = ".".join(parts[:k])
                if target in modules and target != m and not m.startswith(target + "."):
                    graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    import networkx as nx

    return list(nx.simple_cycles(nx.DiGraph([(a, b) for a, bs in graph.items() for b in bs]), length_bound=8))


def test_no_import_cycle_at_import_time():
    assert _cycles(_graph(lazy=False)) == []


def test_subsets_and_subset_selection_do_not_import_each_other():
    graph = _graph(lazy=True)
    assert not ("otlp.core.subsets" in graph["otlp.lp.formulations.subset_selection"]
                and "otlp.lp.formulations.subset_selection" in graph["otlp.core.subsets"])


def test_no_import_cycle_even_through_function_level_imports():
    assert _cycles(_graph(lazy=True)) == []


def test_the_lp_ir_is_on_the_ground_floor():
    graph = _graph(lazy=True)
    assert graph["otlp.lp.ir"] <= {"otlp.core", "otlp.core.errors"}
    assert "otlp.lp.formulations" not in graph["otlp.lp.solution"] and "otlp.lp.ir" in graph["otlp.lp.solution"]


def test_the_core_install_imports_without_optional_packages():
    code = BLOCK + """
import otlp
bad = []
names = [info.name for info in pkgutil.walk_packages(otlp.__path__, "otlp.")]
for name in names:
    if name.endswith(".__main__"):  # python -m otlp.cli: running it is the command itself
        continue
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        print("NEEDS", name, exc.name)
    except Exception as exc:
        print("BROKEN", name, type(exc).__name__, exc)
print("DONE", len(names))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stderr
    lines = proc.stdout.splitlines()
    assert not [x for x in lines if x.startswith("BROKEN")]
    needs = [x.split() for x in lines if x.startswith("NEEDS")]
    outside = [(m, pkg) for _, m, pkg in needs if not m.startswith(TORCH_MODULES)]
    assert outside == []  # only the samplers' multi-step laws and the decode loop may need torch
    assert all(pkg.split(".")[0] == "torch" for _, _, pkg in needs)


def test_multipath_lp_needs_no_torch():
    code = BLOCK + "import otlp.lp.formulations.multipath, otlp.multistep.armodel\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_the_test_suite_collects_without_optional_packages():
    # a core-only install: modules needing torch are skipped and named at collection, not collection errors
    code = BLOCK + """
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-rs", "tests"]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "needs the optional package 'torch'" in proc.stdout


def test_import_otlp_loads_neither_torch_nor_the_kernels():
    code = "import sys, otlp\nprint(sorted(m for m in sys.modules if m in ('torch', 'otlp.backend.native')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_top_level_names_resolve():
    import otlp
    from otlp.optimal.transport import OptimalTransport
    from otlp.sweep import run_sweep

    assert otlp.OptimalTransport is OptimalTransport and otlp.sweep.run_sweep is run_sweep
    assert type(otlp.verifier("rrs")).__name__ == "RecursiveRejection"
    assert set(otlp.__all__) <= set(dir(otlp)) | {"OptimalTransport", *otlp._SUBPACKAGES}


#: the layers of docs/ARCHITECTURE.md, bottom up (a module's layer is the longest prefix listed)
LAYERS = {
    "core": ("otlp.core",),
    "backend": ("otlp.backend",),
    "lp": ("otlp.lp",),
    "rules": ("otlp.optimal", "otlp.verifiers", "otlp.certification", "otlp.multistep", "otlp.engines"),
    "apps": ("otlp.decode", "otlp.sweep", "otlp.theorems", "otlp.cli", "otlp"),
}


def _layer(module: str) -> str:
    best = max(((prefix, name) for name, prefixes in LAYERS.items() for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), key=lambda t: len(t[0]))
    return best[1]


def _edges(lazy: bool) -> set[tuple[str, str, str, str]]:
    return {(a, b, _layer(a), _layer(b)) for a, bs in _graph(lazy).items() for b in bs}


def test_every_module_has_a_layer():
    assert all(_layer(m) for m in _graph(lazy=False))


def test_the_speed_machinery_imports_only_the_core():
    bad = [(a, b) for a, b, la, lb in _edges(lazy=True) if la == "backend" and lb not in ("core", "backend")]
    assert bad == []


def test_the_core_reaches_the_speed_machinery_only_through_the_array_namespace():
    # the maths (distributions, drafts, psi, subsets) never imports the kernels, threads, CUDA graphs or scratch
    # arrays. Three doors, each a function-level import of C kernels with their numpy twins pinned by tests:
    # otlp.core.xp (the array namespace the equations are written in: its packed sort), otlp.core.psi and
    # otlp.core.psi_wor (psi on the sorted prefixes)
    doors = {("otlp.core.xp", "otlp.backend.native"), ("otlp.core.xp", "otlp.backend.scratch"),
             ("otlp.core.psi_wor", "otlp.backend.native"), ("otlp.core.xp", "otlp.backend"),
             ("otlp.core.psi_wor", "otlp.backend"), ("otlp.core.psi", "otlp.backend.native"),
             ("otlp.core.psi", "otlp.backend")}
    bad = [(a, b) for a, b, la, lb in _edges(lazy=True) if la == "core" and lb == "backend" and (a, b) not in doors]
    assert bad == []
    at_import = [(a, b) for a, b, la, lb in _edges(lazy=False) if la == "core" and lb not in ("core",)
                 and (a, b) not in {("otlp.core.xp", "otlp.backend.scratch"), ("otlp.core.xp", "otlp.backend")}]
    assert at_import == []


def test_the_core_and_the_lp_layer_never_import_rules_or_apps():
    allowed = {"core": {"core", "backend", "lp"}, "lp": {"core", "lp", "rules"}}
    bad = [(a, b) for a, b, la, lb in _edges(lazy=True) if la in allowed and lb not in allowed[la]]
    assert bad == []
    # the LP layer reaches the rules only for the exact optimum it is checked against, never the torch samplers
    assert not [(a, b) for a, b, la, lb in _edges(lazy=True) if la == "lp" and b.startswith(("otlp.verifiers",
                                                                                               "otlp.engines"))]


def test_the_rules_never_import_the_apps():
    bad = [(a, b) for a, b, la, lb in _edges(lazy=True) if la == "rules" and lb == "apps"
           and b not in ("otlp.cli", "otlp.cli.util")]  # the progress line
    assert bad == []


def test_the_reference_rule_calls_no_c_and_one_module_picks_the_host_kernels():
    # otlp.optimal.chains is the definition of the optimal rule (numpy and torch): it imports the core only (the
    # equations' maths and array namespace), never the backend; otlp.optimal.host is the one module of the rule that
    # chooses between a C kernel of otlp.backend.native and that reference. The samplers' own passes (the CPU route's
    # normalisation and one-draft form, the bucketed route's loops) call their kernels from their modules.
    graph = _graph(lazy=True)
    assert {b for b in graph["otlp.optimal.chains"] if _layer(b) != "core"} == set()
    rule = ("otlp.optimal.chains", "otlp.optimal.transport", "otlp.optimal.batch", "otlp.optimal.paths",
            "otlp.optimal.generic", "otlp.optimal.tree_law", "otlp.optimal.sortfree")
    assert [(a, b) for a in rule for b in graph[a] if _layer(b) == "backend"] == []
    assert "otlp.backend.native" in graph["otlp.optimal.host"]
