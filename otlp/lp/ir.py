"""The declarative model IR: what a formulation builds and a backend emits.

Two kinds of model:

* :class:`LinearModel` -- ``max`` or ``min`` of ``c . x`` subject to ``row_lower <= A x <= row_upper`` and
  ``lower <= x <= upper``; variables come in named :class:`Block` s and rows in named groups, so a solution maps
  back to the formulation's objects (``S[i, omega]``, ``beta[i | omega]``...).
* :class:`FlowNetwork` -- a directed graph with arc capacities (``inf`` allowed), a source and a sink, for the
  max-flow formulations; named arc groups map a flow back to variables.

Neither knows any solver. Sizes are known before building (:class:`ModelSize`), and a model that would not fit in
memory is refused before allocation.

This module is on the ground floor of the package (it imports only numpy, scipy and otlp.core.errors), so that
``otlp.lp.solution``, every backend in ``otlp.lp.solvers`` and the formulations can all import it without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from otlp.core.errors import MEMORY_LIMIT_BYTES, InputError, ModelTooLargeError


@dataclass(frozen=True)
class ModelSize:
    """Counts known before a model is built. ``bytes`` is a conservative estimate of peak memory."""

    variables: int
    constraints: int
    nonzeros: int

    @property
    def bytes(self) -> int:
        # CSR (8-byte value + 8-byte index per nonzero) built from COO (another 24 bytes per nonzero),
        # plus a backend copy, plus per-variable and per-row vectors.
        return int(48 * self.nonzeros + 48 * self.variables + 32 * self.constraints)

    def check(self, what: str, limit_bytes: float = MEMORY_LIMIT_BYTES) -> ModelSize:
        """Raise :class:`ModelTooLargeError` (naming the size) when the model would not fit."""
        if self.bytes > limit_bytes:
            raise ModelTooLargeError(
                f"{what} with {self.variables:,} variables, {self.constraints:,} constraints and "
                f"{self.nonzeros:,} nonzeros", self.bytes, limit_bytes,
            )
        return self

    def __str__(self) -> str:
        return f"{self.variables:,} variables, {self.constraints:,} constraints, {self.nonzeros:,} nonzeros"


@dataclass(frozen=True)
class Block:
    """A named block of variables ``x[offset : offset + size]`` viewed with ``shape``."""

    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)


@dataclass
class LinearModel:
    """A linear program ``sense c.x  s.t.  row_lower <= A x <= row_upper,  lower <= x <= upper``.

    Build it with :meth:`add_block`, :meth:`add_rows` and :meth:`set_objective`; read it through the
    attributes ``A`` (``scipy.sparse.csr_matrix [M, N]``), ``objective`` ``[N]``, ``row_lower``/``row_upper``
    ``[M]`` and ``lower``/``upper`` ``[N]``. Equality rows have ``row_lower == row_upper``.
    """

    name: str
    sense: str = "max"
    blocks: dict[str, Block] = field(default_factory=dict)
    row_blocks: dict[str, slice] = field(default_factory=dict)
    constant: float = 0.0

    def __post_init__(self) -> None:
        if self.sense not in ("max", "min"):
            raise InputError(f"sense must be 'max' or 'min', got {self.sense!r}")
        self._num_vars = 0
        self._num_rows = 0
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self._objective: dict[str, np.ndarray] = {}
        self._coo: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._row_lower: list[np.ndarray] = []
        self._row_upper: list[np.ndarray] = []
        self._A: sp.csr_matrix | None = None

    # -- building ---------------------------------------------------------------------------------------
    def add_block(self, name: str, shape: int | tuple[int, ...], lower: float | np.ndarray = 0.0,
                  upper: float | np.ndarray = np.inf) -> Block:
        """Add a block of variables with bounds (scalars or arrays broadcast to ``shape``)."""
        if name in self.blocks:
            raise InputError(f"variable block {name!r} already exists in model {self.name!r}")
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        block = Block(name, self._num_vars, shape)
        self.blocks[name] = block
        self._num_vars += block.size
        self._lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), shape).reshape(-1).copy())
        self._upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), shape).reshape(-1).copy())
        self._A = None
        return block

    def set_objective(self, block: str, coefficients: float | np.ndarray) -> None:
        """Objective coefficients of one block (other blocks default to 0)."""
        b = self.blocks[block]
        self._objective[block] = np.broadcast_to(np.asarray(coefficients, dtype=np.float64), b.shape).reshape(-1)

    def add_rows(self, name: str, rows: np.ndarray, cols: np.ndarray, values: np.ndarray | float,
                 lower: float | np.ndarray, upper: float | np.ndarray, count: int | None = None) -> slice:
        """Add a named group of rows from COO triplets.

        ``rows`` index the group's own rows (0 .. count-1), ``cols`` are global variable indices (use
        ``block.offset + local``). Returns the slice of the group in ``A``.
        """
        if name in self.row_blocks:
            raise InputError(f"row group {name!r} already exists in model {self.name!r}")
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        cols = np.asarray(cols, dtype=np.int64).reshape(-1)
        vals = np.broadcast_to(np.asarray(values, dtype=np.float64), rows.shape).reshape(-1)
        m = int(count if count is not None else (rows.max() + 1 if rows.size else 0))
        group = slice(self._num_rows, self._num_rows + m)
        self._coo.append((rows + self._num_rows, cols, vals))
        self._row_lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (m,)).copy())
        self._row_upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (m,)).copy())
        self.row_blocks[name] = group
        self._num_rows += m
        self._A = None
        return group

    # -- reading ----------------------------------------------------------------------------------------
    @property
    def num_variables(self) -> int:
        return self._num_vars

    @property
    def num_constraints(self) -> int:
        return self._num_rows

    def size(self) -> ModelSize:
        return ModelSize(self._num_vars, self._num_rows, int(sum(c[0].size for c in self._coo)))

    @property
    def A(self) -> sp.csr_matrix:
        """The constraint matrix, ``csr [M, N]`` (duplicates summed)."""
        if self._A is None:
            if self._coo:
                r = np.concatenate([c[0] for c in self._coo])
                c = np.concatenate([c[1] for c in self._coo])
                v = np.concatenate([c[2] for c in self._coo])
            else:
                r = c = np.zeros(0, dtype=np.int64)
                v = np.zeros(0)
            self._A = sp.csr_matrix((v, (r, c)), shape=(self._num_rows, self._num_vars))
            self._A.sum_duplicates()
        return self._A

    @property
    def objective(self) -> np.ndarray:
        c = np.zeros(self._num_vars)
        for name, coef in self._objective.items():
            c[self.blocks[name].slice] = coef
        return c

    @property
    def lower(self) -> np.ndarray:
        return np.concatenate(self._lower) if self._lower else np.zeros(0)

    @property
    def upper(self) -> np.ndarray:
        return np.concatenate(self._upper) if self._upper else np.zeros(0)

    @property
    def row_lower(self) -> np.ndarray:
        return np.concatenate(self._row_lower) if self._row_lower else np.zeros(0)

    @property
    def row_upper(self) -> np.ndarray:
        return np.concatenate(self._row_upper) if self._row_upper else np.zeros(0)

    def split(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """A flat primal vector ``[N]`` -> {block name: array of the block's shape}."""
        return {name: np.asarray(x[b.slice]).reshape(b.shape) for name, b in self.blocks.items()}

    def split_rows(self, y: np.ndarray) -> dict[str, np.ndarray]:
        """A flat row vector ``[M]`` (e.g. duals) -> {row group: array}."""
        return {name: np.asarray(y[s]) for name, s in self.row_blocks.items()}

    def flatten(self, primal: dict[str, np.ndarray]) -> np.ndarray:
        """Inverse of :meth:`split` (object dtype is kept, for exact rationals)."""
        dtype = object if any(np.asarray(v).dtype == object for v in primal.values()) else np.float64
        x = np.zeros(self._num_vars, dtype=dtype)
        for name, b in self.blocks.items():
            x[b.slice] = np.asarray(primal[name], dtype=dtype).reshape(-1)
        return x


@dataclass
class FlowNetwork:
    """A max-flow problem: arcs ``tails[k] -> heads[k]`` with ``capacities[k]`` (``inf`` allowed).

    ``arc_blocks`` names groups of arcs (a slice of the arc arrays each), so a flow maps back to variables;
    ``node_blocks`` does the same for nodes.
    """

    name: str
    num_nodes: int
    tails: np.ndarray  # [E] int64
    heads: np.ndarray  # [E] int64
    capacities: np.ndarray  # [E] float64, inf allowed
    source: int
    sink: int
    arc_blocks: dict[str, slice] = field(default_factory=dict)
    node_blocks: dict[str, slice] = field(default_factory=dict)

    @property
    def num_arcs(self) -> int:
        return int(self.tails.size)

    def size(self) -> ModelSize:
        return ModelSize(self.num_arcs, self.num_nodes, 2 * self.num_arcs)

    def split(self, flow: np.ndarray) -> dict[str, np.ndarray]:
        """A flow ``[E]`` -> {arc group: the flows on it}."""
        return {name: np.asarray(flow[s]) for name, s in self.arc_blocks.items()}


@dataclass
class TransportProblem:
    """A discrete optimal-transport problem ``min_C <cost, C>`` over couplings of ``a [V]`` and ``b [M]``.

    ``value_offset + value_scale * <cost, C*>`` is the formulation's value (FullOTLP: 1 - min E[1(i not in
    set(omega))] = alpha*). ``column_labels`` names the columns (e.g. the tuples omega).
    """

    name: str
    a: np.ndarray  # [V]
    b: np.ndarray  # [M]
    cost: np.ndarray  # [V, M]
    value_offset: float = 0.0
    value_scale: float = 1.0

    def size(self) -> ModelSize:
        V, M = self.cost.shape
        return ModelSize(V * M, V + M, 2 * V * M)
