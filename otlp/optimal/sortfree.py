"""The optimal rule's slot decided without the class chain at every position: the certified cell rule (issue 41).

The default device route (:func:`.chains.tuple_rule` with ``window = V``) computes the served group's class chain at
every position of the row, a root of ``slot_mass`` (Newton steps) per position, only to read its running hazard at
the n draws. Here, on torch tensors of any device, with static shapes and no host synchronisation, the same slot is
decided from *bounds* on that hazard, which need a root only per cell of positions:

* The ratio order, psi, m*, the served group (s, e] and the residual draw are the device route's own
  (:func:`.chains.prefix`, :func:`.chains.served_group`, :func:`.chains.residual_index`): one implementation.
* The hazard at position j > s of the group is (design note ``sortfree-rule.md`` §3, with p_j = r_j q_j)

      lam_j = log F(H_j, psi_j, r_j) - log F(H_j, psi_j, r_{j-1}),
      F(H, psi, r) = the largest root y in [0, Qe - H] of (H + y)^n - H^n - r y = psi - psi_e   (``slot_mass``),

  the integral over the ratio of G = d log F / dr = 1 / (n u^(n-1) - r), u = H + F. Over a *cell* of consecutive
  positions a..b (exclusive prefix sums (Qa, Pa), draft mass qb, ratios from r0 = r_{a-1} to r1 = r_b; the ratios
  increase along the order) every earlier token of the cell has its ratio in [r0, r], so along r the point lies
  between the two fixed points (Qa, psi_a) and (Qa + qb, psi_a + r0 qb - ((Qa + qb)^n - Qa^n)), and

      sum_{j in a..b} lam_j  in  [ log F(Qa, psi_a, r1) / F(Qa, psi_a, r0),  log F(H*, psi*, r1) / F(H*, psi*, r0) ],

  four roots per cell and a width second order in the cell's ratio span times its mass.
* *Cells.* Positions are cut into cells of ``cell`` positions. The cells holding s and the n draws are *exact*:
  their per-position hazards lam_j = log(before_j / y_j) (y_j = F(H_j, psi_j, r_{j-1}), before_j = y_{j+1} + q_j:
  the chain's own definition, a root a position), so the hazard up to each draw is exact inside its cell; every
  cell strictly between s's cell and the top draw's takes the interval above.
* *Certificate.* The piece hazards h_k of :func:`.chains._pieces` (the hazard between consecutive draws by
  position) get intervals (lower bounds minus lower bounds: the cells below both draws cancel); the piece weights
  are monotone in each h_k (piece k fires more with a larger h_k, later pieces reach less), so each slot's weight
  and the running sums of the weights (and, through sum = 1, their complements) get intervals. The slot is
  *certified* when ``u[:, 0]`` (times the total) falls, by ``MARGIN``, between the bounds of one slot's two ends
  (the draw of :func:`.chains.sample`: the first slot whose running weight exceeds it).
* *Refinement.* ``rounds`` times, every row makes its ``refine`` widest bounded cells exact and tries again (static
  shapes: every row does the work, a certified row keeps its first decision).
* *Fallback.* A row still undecided takes the full chain (:func:`.chains.tuple_rule` with ``NEWTON_STEPS`` and
  :func:`.chains.sample`, the device route itself), computed with static shapes on every row (``fallback_rows``
  None, exact) or on the first ``fallback_rows`` undecided rows gathered into a ``[F, V]`` batch (cheaper; a row
  beyond them is counted in ``Decision.overflow`` and keeps the certificate's best guess).

Cost, against the chain's ~8 Newton steps on every position of ``[B, V]``: 4 roots on ``[B, V / cell]``, 1 on
``[B, (n + 1 + rounds refine) (cell + 1)]`` (``roots``: torch's ops, or one fused kernel each,
:mod:`.triton_roots`); the sort and psi as before; and the fallback. Bytes moved over the read floor at B = 64,
V = 128k, n = 4 (benchmarks/bytes_moved.py): the certificate 134x (fused roots ~117x), of which the sort, psi, the
served group and the residual draw that it shares with the device route are ~110x; the device route 828x; with the
fallback on every row 871x. Not yet here: the design note's histogram and compaction, which would replace the sort.
The same tokens as the device route and the CPU route for the same uniforms, up to decisions within ``MARGIN`` of a
slot's end (which the fallback takes) and the routes' own rounding (tests/optimal/test_sortfree.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from otlp.core import xp as X
from otlp.optimal import chains as C

#: rounds of refinement before the fallback, and the cells each round makes exact per row.
ROUNDS = 1
REFINE = 4
#: a certified decision keeps u[:, 0] times the total this far from the bounds of the slot's ends.
MARGIN = 1e-9
#: widening of every hazard interval, relative and absolute (roots and sums in another order than the chain's).
TOL_REL = 1e-9
TOL_ABS = 1e-11
#: a certain slot's hazard (y_j = 0, lam = +inf) as a finite number: exp(-CAP) is 0 in float64, as exp(-inf).
CAP = 1e3
#: Newton steps of the roots (:func:`.chains.slot_mass`).
STEPS = C.NEWTON_STEPS


def cell_size(V: int) -> int:
    """Positions per cell for V tokens: the power of two near sqrt(V) (128 at 32k, 256 at 128k), so that the bounded
    cells (V / cell) and the exact ones ((n + 1) cell) cost about alike."""
    return 1 << (max(V - 1, 1).bit_length() // 2)


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s result: ``tokens, index [B]`` (as :func:`.chains.sample`), ``rounds int64 [B]`` the round that
    certified the row (0 .. ``rounds``; ``rounds + 1``: the fallback), ``overflow int64 []`` the undecided rows past
    ``fallback_rows`` (0 when the fallback took every row)."""

    tokens: object
    index: object
    rounds: object
    overflow: object


def verify(p, q, drafts, u, **options):  # noqa: ANN001, ANN003, ANN201 - tensors
    """``(tokens int64 [B], accepted_index int64 [B])`` for ``p, q [B, V]`` (any float dtype, normalised here as the
    device route does), ``drafts int64 [B, n]``, ``u [B, 2]``: :func:`decide` on the normalised rows."""
    d = decide(C.normalised_rows(p), C.normalised_rows(q), drafts.long(), u.double(), **options)
    return d.tokens, d.index


def decide(P, Q, w, U, *, cell: int | None = None, rounds: int = ROUNDS, refine: int = REFINE,  # noqa: ANN001
           fallback_rows: int | None = None, fallback: bool = True, roots=None) -> Decision:  # noqa: ANN001
    """The rule on normalised float64 rows ``P, Q [B, V]``, drafts ``w int64 [B, n]``, uniforms ``U float64 [B, 2]``
    (module docstring). ``cell``: positions per cell (default :func:`cell_size`); ``fallback=False`` leaves the
    undecided rows at the certificate's best guess (for tests of the certificate alone); ``roots``: the root solver,
    :func:`.chains.slot_mass`'s signature (default it; :func:`.triton_roots.slot_mass`: one fused kernel)."""
    import torch

    B, V = P.shape
    n = w.shape[1]
    if n == 1:  # the closed form needs no order (chains.single_draft), as the device route
        tokens, index = C.single_draft(P, Q, w, U)
        zero = torch.zeros(B, dtype=torch.int64, device=P.device)
        return Decision(tokens.long(), index.long(), zero, zero.sum())
    pre = C.prefix(P, Q, n)
    g = _Group(pre, w, cell or cell_size(V), roots or C.slot_mass)
    lo, hi, exact = g.cell_bounds()  # [B, NC] each
    slot, ok = g.certify(lo, hi, U[:, :1])
    done = torch.zeros(B, dtype=torch.int64, device=P.device)
    for r in range(1, rounds + 1):  # static: every row refines, a certified row keeps its first slot
        lo, hi, exact = g.refine(lo, hi, exact, refine)
        s2, ok2 = g.certify(lo, hi, U[:, :1])
        slot = torch.where(ok, slot, s2)
        done = torch.where(ok | ~ok2, done, r)
        ok = ok | ok2
    done = torch.where(ok, done, rounds + 1)
    tokens, index = g.tokens(slot, U)
    overflow = done.new_zeros(())
    if fallback:
        tokens, index, overflow = _fallback(pre, w, U, ~ok, tokens, index, fallback_rows)
    return Decision(tokens, index, done, overflow)


def _fallback(pre: C.Prefix, w, U, todo, tokens, index, rows: int | None):  # noqa: ANN001, ANN202
    """The full chain (the device route: :func:`.chains.tuple_rule`, :func:`.chains.sample`) where ``todo [B]``, on
    the sorted rows ``pre`` (:func:`full_rule_where`)."""
    def full(pick):  # noqa: ANN001, ANN202
        sub = pre if isinstance(pick, slice) else C.Prefix(
            n=pre.n, order=pre.order[pick], ps=pre.ps[pick], qs=pre.qs[pick], prefix_q=pre.prefix_q[pick],
            suffix_q=pre.suffix_q[pick], psi=pre.psi[pick], m_star=pre.m_star[pick], alpha=pre.alpha[pick])
        accept, reject = C.tuple_rule(sub, w[pick], steps=C.NEWTON_STEPS)
        return C.sample(sub, accept, reject, w[pick], U[pick])

    return full_rule_where(full, todo, tokens, index, rows)


def full_rule_where(full, todo, tokens, index, rows: int | None):  # noqa: ANN001, ANN201
    """``(tokens, index, overflow)`` with the full rule's answer ``full(pick) -> (tokens, index)`` of the rows
    ``pick`` (a slice of all rows, or an int64 index ``[F]``) where ``todo bool [B]``: on every row (``rows`` None) or
    on the first ``rows`` rows of ``todo`` gathered into ``[F, V]`` (static shapes either way; ``overflow``: the
    undecided rows left past F)."""
    import torch

    if rows is None:
        t, i = full(slice(None))
        return torch.where(todo, t, tokens), torch.where(todo, i, index), todo.new_zeros((), dtype=torch.int64)
    F = min(rows, todo.shape[0])
    pick = torch.sort((~todo).to(torch.int8), stable=True).indices[:F]  # [F] the undecided rows first
    t, i = full(pick)
    take = todo[pick]
    tokens, index = tokens.clone(), index.clone()
    tokens[pick] = torch.where(take, t, tokens[pick])
    index[pick] = torch.where(take, i, index[pick])
    return tokens, index, (todo.sum() - take.sum()).clamp(min=0)


class _Group:
    """The served group of each row's drafted tuple on the ratio order, cut into cells of ``k`` positions."""

    def __init__(self, pre: C.Prefix, w, k: int, roots=C.slot_mass, ratio=None, merged=None) -> None:  # noqa: ANN001
        """``ratio, merged [B, V]`` by position (both or neither; :mod:`.device_buckets`'s compressed instance): the
        ratio r of each position (a merged run's: the largest its tokens may have) and which positions are merged
        runs of tokens, whose hazard is never exact but the interval of one cell of that one position."""
        import torch

        self.pre, self.w, self.k, self.n, self.roots = pre, w, k, pre.n, roots
        self.ratio, self.merged = ratio, merged
        n = pre.n
        V = pre.ps.shape[-1]
        self.V, self.NC = V, -(-V // k)
        self.pos, self.top, self.s, self.e = C.served_group(pre, w)  # [B, n], [B, 1] x 3
        self.psi_s, self.psi_e = X.take(pre.psi, self.s), X.take(pre.psi, self.e)  # [B, 1]
        self.Qe = X.take(pre.prefix_q, self.e)  # [B, 1] the draft mass below the group's end
        self.outer = self.e > pre.m_star[:, None]  # [B, 1] the group cannot reject
        self.cs, self.ct = self.s // k, self.top // k  # [B, 1] the cells of s and of the top draw
        # the exact cells: the draws' (slots 0 .. n-1) and s's (slot n); their per-position hazards [B, n + 1, k]
        self.ecell = torch.cat([self.pos // k, self.cs], dim=1)  # [B, n + 1]
        self.elo, self.ehi = self.cell_intervals(self.ecell)
        off = (self.pos - self.ecell[:, :n] * k)[:, :, None]  # [B, n, 1] each draw's offset in its cell
        # [B, n] the hazard from the cell's start up to the draw, bounds (equal without merged runs)
        self.partial_lo = self.elo.cumsum(-1)[:, :n].gather(-1, off)[..., 0]
        self.partial_hi = self.ehi.cumsum(-1)[:, :n].gather(-1, off)[..., 0]
        self.in_group = self.pos >= self.s  # [B, n]
        self.beta = self._beta()  # [B] (read by every certify call: computed once)

    # -- the chain's quantities at positions -------------------------------------------------------------------------

    def _ratio(self, j):  # noqa: ANN001, ANN202 - positions [B, m] (clamped) -> r_j [B, m]
        """r_j = t_j / q_j as the chain forms it (:func:`.chains.group_terms`): 1 / (q / p), 0 where q = 0, and at an
        outer group's first position t_s = p_s - (psi_e - psi_s) (GR Thm 6.2's vertex)."""
        import torch

        pre = self.pre
        ps, qs = X.take(pre.ps, j), X.take(pre.qs, j)
        q_pos = qs > 0
        q_div = torch.where(q_pos, qs, 1.0)
        t_first = X.maximum(ps - (self.psi_e - self.psi_s), 0.0)
        first = (j == self.s) & self.outer
        r = torch.where(q_pos, 1.0 / (q_div / ps), 0.0) if self.ratio is None else X.take(self.ratio, j)
        return torch.where(q_pos & first, t_first / q_div, r)

    def _F(self, H, psi, r):  # noqa: ANN001, ANN202
        """F(H, psi, r) (module docstring): the largest root in [0, Qe - H], by :func:`.chains.slot_mass`."""
        Qe, psi_e = self.Qe, self.psi_e
        while Qe.dim() < H.dim():
            Qe, psi_e = Qe[..., None], psi_e[..., None]
        return self.roots(H, X.maximum(Qe - H, 0.0), r, psi - psi_e, self.n, STEPS)

    def _cell_hazards(self, cells):  # noqa: ANN001, ANN202 - [B, m] cell numbers -> [B, m, k] hazards
        """The exact per-position hazards of the cells ``cells``: lam_j = log(before_j / y_j) as
        :func:`.chains.group_terms` (a = 1 - y / before, lam = -log1p(-a); ``CAP`` for a certain slot), 0 outside
        the served group's positions s + 1 .. top: k + 1 roots a cell."""
        import torch

        B, m = cells.shape
        pre, k, V = self.pre, self.k, self.V
        # y at the cells' positions and the one after each: y_{j+1} = F(H_{j+1}, psi_{j+1}, r_j) is the next one's y
        jj = cells[:, :, None] * k + torch.arange(k + 1, device=cells.device)  # [B, m, k + 1]
        at = jj.reshape(B, m * (k + 1)).clamp(max=V)  # prefix indices
        y = self._F(X.take(pre.prefix_q, at), X.take(pre.psi, at), self._ratio((at - 1).clamp(min=0, max=V - 1)))
        y = y.reshape(B, m, k + 1)
        j = jj[..., :k]  # [B, m, k] the cells' positions
        y1 = torch.where(j + 1 >= self.e[:, :, None], 0.0, y[..., 1:])  # y_e = 0
        before = y1 + X.take(pre.qs, j.reshape(B, m * k).clamp(max=V - 1)).reshape(B, m, k)
        y = y[..., :k]
        b_pos = before > 0
        a = torch.where(b_pos, (1.0 - y / torch.where(b_pos, before, 1.0)).clamp(0.0, 1.0), 0.0)
        lam = torch.where(a >= 1.0, CAP, -torch.log1p(-a))
        live = (j > self.s[:, :, None]) & (j <= self.top[:, :, None])
        return torch.where(live, lam.clamp(max=CAP), 0.0)

    # -- the cells' intervals ---------------------------------------------------------------------------------------

    def cell_bounds(self):  # noqa: ANN201
        """``(lo, hi, exact)`` ``[B, NC]``: each cell's hazard over the served group's positions s + 1 .. top, exact
        (to ``TOL_ABS``) on the exact cells, the interval of the module docstring on the cells strictly between
        s's and the top draw's, 0 elsewhere."""
        import torch

        k = self.k
        c = torch.arange(self.NC, device=self.s.device)[None, :]  # [1, NC]
        a = (c * k).expand(self.s.shape[0], -1)  # [B, NC] first positions
        lo, hi = self._interval(a, (a + k).clamp(max=self.V))
        between = (c > self.cs) & (c < self.ct)
        lo = torch.where(between, lo * (1.0 - TOL_REL) - TOL_ABS, 0.0).clamp(min=0.0)
        hi = torch.where(between, hi * (1.0 + TOL_REL) + TOL_ABS, 0.0)
        exact = torch.zeros_like(lo, dtype=torch.bool)
        return self._set_exact(lo, hi, exact, self.ecell, self.elo, self.ehi)

    def _interval(self, a, b):  # noqa: ANN001, ANN202 - first positions a, one past the last b [B, m] (a < b)
        """``(lo, hi)`` ``[B, m]``: the interval of the module docstring on the hazard over positions a .. b - 1
        (unwidened; [0, CAP] where the ratios do not increase)."""
        import torch

        pre, n = self.pre, self.n
        Qa, psi_a = X.take(pre.prefix_q, a), X.take(pre.psi, a)
        qb = X.take(pre.prefix_q, b) - Qa
        r0, r1 = self._ratio((a - 1).clamp(min=0)), self._ratio(b - 1)
        lo = torch.log(self._F(Qa, psi_a, r1)) - torch.log(self._F(Qa, psi_a, r0))
        Hs, psi_s = Qa + qb, psi_a + r0 * qb - C.power_gap(Qa, qb, n)
        hi = torch.log(self._F(Hs, psi_s, r1)) - torch.log(self._F(Hs, psi_s, r0))
        lo = lo.nan_to_num(0.0, posinf=CAP).clamp(0.0, CAP)
        hi = hi.nan_to_num(CAP, posinf=CAP).clamp(0.0, CAP)
        bad = r1 < r0  # ratios not increasing (q = 0 tokens after the top draw's): no bound
        return torch.where(bad, 0.0, lo), torch.where(bad, CAP, torch.maximum(hi, lo))

    def cell_intervals(self, cells):  # noqa: ANN001, ANN201 - [B, m] cell numbers -> ([B, m, k], [B, m, k])
        """The hazards of the cells ``cells`` position by position, as bounds: exact (:meth:`_cell_hazards`) but at
        merged runs (``merged``), which take the interval of a cell of their one position (widened by ``TOL_*``)."""
        import torch

        lam = self._cell_hazards(cells)
        if self.merged is None:
            return lam, lam
        B, m = cells.shape
        j = cells[:, :, None] * self.k + torch.arange(self.k, device=cells.device)  # [B, m, k]
        a = j.reshape(B, -1).clamp(max=self.V - 1)
        lo, hi = (x.reshape(B, m, self.k) for x in self._interval(a, a + 1))
        live = (j > self.s[:, :, None]) & (j <= self.top[:, :, None])
        run = X.take(self.merged, a).reshape(B, m, self.k) & live
        lo = (lo * (1.0 - TOL_REL) - TOL_ABS).clamp(min=0.0)
        hi = hi * (1.0 + TOL_REL) + TOL_ABS
        return torch.where(run, lo, lam), torch.where(run, hi, lam)

    def _set_exact(self, lo, hi, exact, cells, lam_lo, lam_hi=None):  # noqa: ANN001, ANN202
        """``lo, hi, exact`` with the cells ``cells [B, m]`` set to their hazards ``lam_lo .. lam_hi [B, m, k]``
        (position by position; ``lam_hi`` None: exact, ``lam_lo``)."""
        val_lo = lam_lo.sum(-1)  # [B, m]
        val_hi = val_lo if lam_hi is None else lam_hi.sum(-1)
        return (lo.scatter(1, cells, val_lo - TOL_ABS - TOL_REL * val_lo),
                hi.scatter(1, cells, val_hi + TOL_ABS + TOL_REL * val_hi), exact.scatter(1, cells, True))

    def refine(self, lo, hi, exact, m: int):  # noqa: ANN001, ANN201
        """The widest ``m`` bounded cells of every row made exact."""
        import torch

        width = torch.where(exact, -1.0, hi - lo)
        cells = width.topk(min(m, self.NC), dim=1).indices  # [B, m]
        return self._set_exact(lo, hi, exact, cells, *self.cell_intervals(cells))

    # -- the certificate --------------------------------------------------------------------------------------------

    def certify(self, lo, hi, u0):  # noqa: ANN001, ANN201
        """``(slot [B], certified [B])``: the slot (0 .. n - 1 a draft, n reject) of :func:`.chains.sample`'s draw
        with ``u0 [B, 1]`` where the intervals decide it (the slot of the intervals' midpoints elsewhere)."""
        import torch

        n, k = self.n, self.k
        z = lo.new_zeros(lo.shape[0], 1)
        clo, chi = torch.cat([z, lo.cumsum(1)], 1), torch.cat([z, hi.cumsum(1)], 1)  # [B, NC + 1] exclusive sums
        cell = self.pos // k
        L_lo = X.take(clo, cell) + self.partial_lo  # [B, n] the hazard over s + 1 .. d, bounds
        L_hi = X.take(chi, cell) + self.partial_hi
        # the group's draws by position, descending (chains._pieces)
        key = torch.where(self.in_group, self.pos, -1)
        by_pos = X.stable_descending(key)  # [B, n]
        c = self.in_group.sum(-1)  # [B]
        ks = torch.arange(n, device=lo.device)[None, :]
        valid, more = ks < c[:, None], ks + 1 < c[:, None]

        def pieces(Lam):  # noqa: ANN001, ANN202 - piece hazards h_k = Lambda(d_k) - Lambda(d_{k+1}) [B, n]
            at = X.take(Lam, by_pos)
            nxt = torch.where(more, X.pad_last(at[:, 1:], 0.0), 0.0)
            return torch.where(valid, at - nxt, 0.0)

        h_lo, h_hi = pieces(L_lo), pieces(L_hi)
        h_lo = (h_lo - TOL_ABS - TOL_REL * h_lo.abs()).clamp(min=0.0)
        h_hi = (h_hi + TOL_ABS + TOL_REL * h_hi.abs()).clamp(min=0.0)
        # piece j (1-based) fires with reach (1 - e^(-j h_j)), shared by its j draws; the log reach falls by j h_j, so
        # before piece j it is minus the running sum of i h_i over i < j (its bounds from the other end's h); slot k
        # gets the pieces j > k: a running sum from the last piece
        jh_lo, jh_hi = (ks + 1) * h_lo, (ks + 1) * h_hi  # [B, n]
        fall_lo, fall_hi = jh_hi.cumsum(1), jh_lo.cumsum(1)  # [B, n] (the lower reach falls by the upper h)
        f_lo = torch.exp(-X.pad_first(fall_lo[:, :-1], 0.0)) * -torch.expm1(-jh_lo) / (ks + 1)
        f_hi = torch.exp(-X.pad_first(fall_hi[:, :-1], 0.0)) * -torch.expm1(-jh_hi) / (ks + 1)
        per_lo, per_hi = f_lo.flip(1).cumsum(1).flip(1), f_hi.flip(1).cumsum(1).flip(1)  # [B, n]
        left_lo, left_hi = torch.exp(-fall_lo[:, -1]), torch.exp(-fall_hi[:, -1])  # [B]
        beta = self.beta  # [B]
        share = beta / c.clamp(min=1)
        per_lo = torch.where(valid, per_lo + (left_lo * share)[:, None], 0.0)
        per_hi = torch.where(valid, per_hi + (left_hi * share)[:, None], 0.0)
        slot_lo, slot_hi = X.scatter_rows(per_lo, by_pos), X.scatter_rows(per_hi, by_pos)  # [B, n] by draft slot
        w = self.w
        same = w[:, :, None] == w[:, None, :]
        first_occ = X.first_true(same) == ks
        acc_lo = torch.where(first_occ, torch.where(same, slot_lo[:, None, :], 0.0).sum(-1), 0.0)
        acc_hi = torch.where(first_occ, torch.where(same, slot_hi[:, None, :], 0.0).sum(-1), 0.0)
        # reject (kept only where the row has residual mass, as chains.sample)
        residual = X.take(self.pre.psi, self.pre.m_star[:, None])[:, 0] < 0  # 1 - alpha* > 0
        rej_lo = torch.where(residual, left_lo * (1.0 - beta), 0.0)
        rej_hi = torch.where(residual, left_hi * (1.0 - beta), 0.0)
        wlo, whi = torch.cat([acc_lo, rej_lo[:, None]], 1), torch.cat([acc_hi, rej_hi[:, None]], 1)  # [B, n + 1]
        # the total T: 1 with the reject, 1 - reject without it; the running sums and their complements T - tail
        t_lo = torch.where(residual, 1.0, torch.maximum(1.0 - left_hi * (1.0 - beta), wlo.sum(1)))[:, None]
        t_hi = torch.where(residual, 1.0, torch.minimum(1.0 - left_lo * (1.0 - beta), whi.sum(1)))[:, None]
        head_lo, head_hi = wlo.cumsum(1), whi.cumsum(1)
        tail_lo, tail_hi = wlo.sum(1, keepdim=True) - head_lo, whi.sum(1, keepdim=True) - head_hi
        cw_lo = torch.maximum(head_lo, t_lo - tail_hi)  # [B, n + 1] bounds of the running weights
        cw_hi = torch.minimum(head_hi, t_hi - tail_lo)
        x_lo, x_hi = u0 * t_lo, u0 * t_hi  # the draw's point, u0 times the total
        below = torch.cat([torch.ones_like(z, dtype=torch.bool), cw_hi[:, :-1] < x_lo - MARGIN], 1)
        above = cw_lo > x_hi + MARGIN
        ok = below & above & (whi > 0)  # [B, n + 1]: slot j decided
        certified = ok.any(1)
        mid = 0.5 * (cw_lo + cw_hi)
        guess = X.searchsorted_rows(mid, 0.5 * (x_lo + x_hi)).clamp(max=n)
        slot = torch.where(certified, ok.to(torch.int8).argmax(1), guess)
        return slot, certified

    def _beta(self):  # noqa: ANN202
        """The served group's final acceptance, read at its first position (:func:`.chains.group_terms` on the two
        positions s, s + 1 that it reads)."""
        import torch

        win = self.s + torch.arange(2, device=self.s.device)[None, :]
        return C.group_terms(self.pre, win, self.s, self.e, C.NEWTON_STEPS, roots=self.roots).beta[:, 0]

    def tokens(self, slot, U):  # noqa: ANN001, ANN201
        """``(tokens, index)`` of :func:`.chains.sample` for the slot ``slot [B]`` (n: the residual draw with
        ``U[:, 1]``)."""
        import torch

        n, V = self.n, self.V
        drawn = C.residual_index(self.pre, U[:, 1:]).clamp(max=V - 1)
        residual_token = X.take(self.pre.order, drawn[:, None])[:, 0]
        accepted = slot < n
        chosen = X.take(self.w, slot.clamp(max=n - 1)[:, None])[:, 0]
        return torch.where(accepted, chosen, residual_token), torch.where(accepted, slot, -1)
