"""The Newton steps of :func:`.wor.set_plan` on a device in one Triton program per row (issue 45).

On tensors :func:`.wor.set_plan` takes a fixed number of Newton steps as torch operations: about 125 kernel launches a
step, 1,640-2,070 of the 1,800-2,630 of a ``get("optimal_wor").sample`` call at B = 64, V = 128k, top-10 drafts,
n = 2-8 (``benchmarks/bytes_moved.py --ops``). Here the same steps run inside one kernel, program b taking row b:

* the row's weights theta ``[G]`` (the E elements and the reject option R) and the Hessian ``[G, G]`` stay in the
  program (G <= :data:`MAX_G`); theta is written to the row's scratch before each evaluation, to be gathered by the
  sets' members;
* an evaluation walks the drafted sets in blocks of ``BU``: each set's Luce choice over its members (the softmax
  of their theta, shifted by its largest), each element's expected choice y (one-hot sums), the objective, and at
  a step's start the Hessian sum_S P(S) (diag(pi_S) - pi_S pi_S^T) as one ``tl.dot`` per block (M^T N, M and N the
  sets' weighted and plain choices spread over the G elements);
* the Newton system by Gaussian elimination without pivoting (positive definite on the free coordinates; the fixed
  ones, the gauge and the elements no set can choose, are identity rows and columns); a pivot that is not positive
  steps 0, as ``torch.linalg.solve_ex``'s singular rows;
* up to ``TRIALS`` step sizes 1, 1/2, ... accepted as the reference accepts them (the objective's Armijo decrease,
  or a smaller residual); a row that is done or failed takes no more steps.

:func:`.wor.set_plan` is the reference, and its setup (the order, psi, blocks, targets, members and the start) is
shared: ``set_plan(..., kernel=True)`` hands this kernel what it built. The sums run in another order than torch's,
so the plan agrees with the reference to rounding (tests/optimal/test_wor_triton.py, under ``TRITON_INTERPRET=1``:
choices to 1e-12, and the same tokens in the sampler). Static shapes, no host synchronisation.
"""

from __future__ import annotations

import functools

#: the most elements (the support's tokens, OTHER and R) the kernel keeps in registers; larger rows take torch's steps
MAX_G = 64
#: the most slots of a set (n drafts and R) the kernel takes
MAX_S = 16
#: sets per block of an evaluation (``tl.dot`` needs at least 16)
BU = 32


@functools.cache
def _kernel():  # noqa: ANN202, C901, PLR0915 - made on first use: TRITON_INTERPRET is read when it is defined
    import triton
    import triton.language as tl

    @triton.jit
    def rsum(x, axis: tl.constexpr):  # noqa: ANN001, ANN202
        return tl.reduce(x, axis, tl.standard._sum_combine)

    @triton.jit
    def rmax(x, axis: tl.constexpr):  # noqa: ANN001, ANN202
        return tl.reduce(x, axis, tl.standard._elementwise_max)

    @triton.jit
    def evaluate(theta_row, sets_ptr, live_row, probs_row, choice_row, U, E, g,  # noqa: ANN001, ANN202
                 N: tl.constexpr, SP: tl.constexpr, GP: tl.constexpr, BU: tl.constexpr, HESSIAN: tl.constexpr,
                 WRITE: tl.constexpr, SUM: tl.constexpr, MAX: tl.constexpr):
        """(y [GP], sum_S P(S) log sum_{members} e^theta, H [GP, GP] or 0): the sets' expected choices, the
        objective's first term and (HESSIAN) -sum_S P(S) pi_S pi_S^T; WRITE stores the choices [U, N]."""
        a = tl.arange(0, SP)
        zb = (tl.arange(0, BU) * 0).to(tl.float64)  # [BU] zeros (no tl.zeros: see newton's first comment)
        y = (g * 0).to(tl.float64)
        lse = zb
        H = (g[:, None] * 0 + g[None, :] * 0).to(tl.float64)
        for u0 in range(0, U, BU):
            uu = u0 + tl.arange(0, BU)
            um = uu < U
            slot = um[:, None] & (a[None, :] < N + 1)
            el = tl.load(sets_ptr + uu[:, None] * N + a[None, :], mask=um[:, None] & (a[None, :] < N), other=0)
            el = tl.where(a[None, :] == N, E, el).to(tl.int32)  # [BU, SP] slot N: R
            lv = tl.load(live_row + a[None, :] * U + uu[:, None], mask=slot, other=0) != 0  # the members
            th = tl.load(theta_row + el, mask=lv, other=0.0)
            logits = tl.where(lv, th, float("-inf"))
            anyl = MAX(lv.to(tl.int32), 1) > 0  # [BU]
            peak = tl.where(anyl, MAX(logits, 1), 0.0)
            e = tl.exp(logits - peak[:, None])
            total = tl.where(anyl, SUM(e, 1), 1.0)
            ch = e / total[:, None]  # [BU, SP] each member's choice (0 off the members)
            pr = tl.load(probs_row + uu, mask=um, other=0.0)
            w = pr[:, None] * ch
            lse += pr * (peak + tl.log(total))
            M = zb[:, None] + y[None, :] * 0.0  # [BU, GP] w spread over the elements
            C = M
            for s in tl.static_range(N + 1):
                col = SUM(tl.where(a[None, :] == s, el, 0), 1)  # [BU] slot s's element
                at = col[:, None] == g[None, :]
                M += tl.where(at, SUM(tl.where(a[None, :] == s, w, 0.0), 1)[:, None], 0.0)
                if HESSIAN:
                    C += tl.where(at, SUM(tl.where(a[None, :] == s, ch, 0.0), 1)[:, None], 0.0)
            y += SUM(M, 0)
            if HESSIAN:
                H -= tl.dot(tl.trans(M), C, input_precision="ieee")
            if WRITE:
                tl.store(choice_row + uu[:, None] * N + a[None, :], ch, mask=um[:, None] & (a[None, :] < N))
        return y, SUM(lse, 0), H

    @triton.jit
    def solve(H, rhs, G, g, SUM: tl.constexpr):  # noqa: ANN001, ANN202
        """H x = rhs by elimination without pivoting (H positive definite); (x, every pivot positive)."""
        r = g[:, None]
        c = g[None, :]
        ok = G > 0
        for k in range(0, G):
            row = SUM(tl.where(r == k, H, 0.0), 0)  # [GP] along the columns
            col = SUM(tl.where(c == k, H, 0.0), 1)  # [GP] along the rows
            piv = SUM(tl.where(g == k, row, 0.0), 0)
            ok = ok & (piv > 0.0)
            fac = tl.where(g > k, col / tl.where(piv > 0.0, piv, 1.0), 0.0)
            H = H - fac[:, None] * row[None, :]
            rhs = rhs - fac * SUM(tl.where(g == k, rhs, 0.0), 0)
        x = rhs * 0.0
        for i in range(0, G):
            k = G - 1 - i
            row = SUM(tl.where(r == k, H, 0.0), 0)
            piv = SUM(tl.where(g == k, row, 0.0), 0)
            rk = SUM(tl.where(g == k, rhs, 0.0), 0)
            xk = (rk - SUM(row * x, 0)) / tl.where(piv > 0.0, piv, 1.0)
            x = tl.where(g == k, xk, x)
        return x, ok

    @triton.jit
    def newton(theta_ptr, goal_ptr, fixed_ptr, present_ptr, sets_ptr, live_ptr, probs_ptr, failed_ptr, choice_ptr,  # noqa: ANN001, ANN202
               residual_ptr, U, E, G, tol, N: tl.constexpr, SP: tl.constexpr, GP: tl.constexpr, BU: tl.constexpr,
               STEPS: tl.constexpr, TRIALS: tl.constexpr, EVALUATE: tl.constexpr, SOLVE: tl.constexpr,
               SUM: tl.constexpr, MAX: tl.constexpr):
        # no tl.zeros / tl.sum / tl.max: jit functions of triton.language, which an interpreter set after Triton's
        # import cannot call; SUM and MAX are tl.reduce with Triton's combines, passed in as the helpers are
        b = tl.program_id(0).to(tl.int64)
        g = tl.arange(0, GP)
        inside = g < G
        theta_row = theta_ptr + b * GP
        live_row = live_ptr + b * (N + 1) * U
        probs_row = probs_ptr + b * U
        choice_row = choice_ptr + b * U * N
        theta = tl.load(theta_row + g)
        goal = tl.load(goal_ptr + b * GP + g)
        fixed = (tl.load(fixed_ptr + b * GP + g) != 0) | ~inside
        present = (tl.load(present_ptr + b * GP + g) != 0) & inside
        failed = tl.load(failed_ptr + b) != 0
        chosen = tl.where(present, goal, 0.0)
        eye = g[:, None] == g[None, :]
        pinned = fixed[:, None] | fixed[None, :]
        active = ~failed
        for _step in range(STEPS):
            if active:
                tl.debug_barrier()
                y, lse, H = EVALUATE(theta_row, sets_ptr, live_row, probs_row, choice_row, U, E, g, N, SP, GP, BU,
                                     True, False, SUM, MAX)
                f = lse - SUM(chosen * theta, 0)
                residual = MAX(tl.where(present, tl.abs(y - goal), 0.0), 0)
                active = residual > tol
                if active:
                    grad = tl.where(fixed, 0.0, y - goal)
                    H = tl.where(pinned, tl.where(eye, 1.0, 0.0), H + tl.where(eye, y[:, None], 0.0))
                    step, ok = SOLVE(H, -grad, G, g, SUM)
                    finite = (step == step) & (tl.abs(step) < float("inf"))
                    step = tl.where(ok & finite, tl.minimum(tl.maximum(step, -30.0), 30.0), 0.0)
                    slope = SUM(grad * step, 0)
                    t = slope * 0.0 + 1.0  # float64
                    searching = active
                    for _trial in range(TRIALS):
                        if searching:
                            trial = theta + t * step
                            tl.debug_barrier()
                            tl.store(theta_row + g, trial)
                            tl.debug_barrier()
                            y2, lse2, unused = EVALUATE(theta_row, sets_ptr, live_row, probs_row, choice_row, U, E,
                                                        g, N, SP, GP, BU, False, False, SUM, MAX)
                            f2 = lse2 - SUM(chosen * trial, 0)
                            g2 = MAX(tl.where(present, tl.abs(y2 - goal), 0.0), 0)
                            if (f2 <= f + 1e-4 * t * slope) | (g2 < residual):
                                theta = trial
                                searching = residual < 0.0  # False
                            else:
                                t = t * 0.5
                    tl.debug_barrier()
                    tl.store(theta_row + g, theta)  # the accepted point (a rejected trial may be in the scratch)
        tl.debug_barrier()
        y, lse, H = EVALUATE(theta_row, sets_ptr, live_row, probs_row, choice_row, U, E, g, N, SP, GP, BU, False, True,
                       SUM, MAX)
        residual = MAX(tl.where(present, tl.abs(y - goal), 0.0), 0)
        bad = failed | (residual > tol)
        tl.store(residual_ptr + b, tl.where(bad, float("inf"), residual))

    return newton, dict(EVALUATE=evaluate, SOLVE=solve, SUM=rsum, MAX=rmax)


def takes(G: int, n: int) -> bool:
    """Whether the kernel takes rows of G elements (the support, OTHER and R) and n drafts."""
    return G <= MAX_G and n + 1 <= MAX_S


def newton(theta, goal, fixed, present, sets, live, probs, failed, *, steps: int, trials: int, tolerance: float):  # noqa: ANN001, ANN201
    """The Newton steps of :func:`.wor.set_plan` (module docstring) from its setup: ``theta, goal [B, G]`` float64,
    ``fixed, present bool [B, G]``, ``sets int [U, n]``, ``live bool [B, n + 1, U]`` (slot n: R, element G - 1),
    ``probs [B, U]``, ``failed bool [B]`` -> ``(choice [B, U, n], residual [B])``, as set_plan's (inf where a row is
    failed or not within ``tolerance`` after ``steps`` steps)."""
    import torch
    import triton

    B, G = goal.shape
    U, n = sets.shape
    GP, SP = max(16, triton.next_power_of_2(G)), max(2, triton.next_power_of_2(n + 1))

    def padded(x, value):  # noqa: ANN001, ANN202 - [B, G] -> [B, GP], contiguous
        out = torch.full((B, GP), value, dtype=x.dtype, device=x.device)
        out[:, :G] = x
        return out

    theta_scratch = padded(theta.to(torch.float64), 0.0)  # written by the kernel
    choice = torch.empty((B, U, n), dtype=torch.float64, device=goal.device)
    residual = torch.empty((B,), dtype=torch.float64, device=goal.device)
    kernel, helpers = _kernel()
    kernel[(B,)](theta_scratch, padded(goal.to(torch.float64), 0.0), padded(fixed.to(torch.int8), 1),
                    padded(present.to(torch.int8), 0), sets.to(torch.int64).contiguous(),
                    live.to(torch.int8).contiguous(), probs.to(torch.float64).contiguous(),
                    failed.to(torch.int8).contiguous(), choice, residual, U, G - 1, G, float(tolerance), N=n, SP=SP,
                    GP=GP, BU=BU, STEPS=steps, TRIALS=trials, num_warps=4, **helpers)
    return choice, residual
