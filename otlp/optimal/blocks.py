"""The block structure of the exact OT for i.i.d. drafts: records of psi cut the sorted tokens into blocks.

Design note ``exact-ot-design.md`` §2. Sort tokens by decreasing q/p (positions m = 1..V) and let
``psi_m = P_m - Q_m^n``; ``m*`` is the FIRST exact argmin and H* = positions 1..m*, alpha* = 1 + psi_{m*}.

* inner records: 0 and every m in [1, m*] with psi_m < min_{m' < m} psi_{m'} (strict new prefix minimum);
* outer records: every m in [m*, V] with psi_m <= min_{m' > m} psi_{m'} (suffix minimum, ties included).

Consecutive records s < e make a block G = (s, e]; it is inner when e <= m*, else outer. A drafted tuple is
served by the block of its highest-positioned token only (strict priority between blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otlp.subsets import sorted_prefix_psi


@dataclass(frozen=True)
class BlockCuts:
    """Where the records of psi cut the sorted order (all positions 1-based, as in the design note).

    order : int [V], token ids by decreasing q/p.
    psi : float [V + 1], psi_m on the prefixes of ``order``.
    m_star : the first exact argmin of psi.
    records : int [K + 1], increasing, records[0] = 0, records[-1] = V; block j is (records[j], records[j+1]].
    inner : bool [K], block j is inner (its end <= m*).
    """

    order: np.ndarray
    psi: np.ndarray
    m_star: int
    records: np.ndarray
    inner: np.ndarray

    @property
    def alpha_star(self) -> float:
        """alpha* = 1 + psi_{m*} (GR Thm 3.1; Sec. 6 misprints it as psi(H*))."""
        return 1.0 + float(self.psi[self.m_star])


def block_records(p: np.ndarray, q: np.ndarray, n: int) -> BlockCuts:
    """Sort by q/p, compute psi stably (suffix form near Q = 1) and cut at the records of psi (note §2)."""
    return cut_at_records(*sorted_prefix_psi(p, q, n))


def cut_at_records(order: np.ndarray, psi: np.ndarray) -> BlockCuts:
    """The cuts of the sorted order ``[V]`` at the records of ``psi [V + 1]`` (:func:`block_records` from psi)."""
    V = order.size
    m_star = int(np.argmin(psi))  # first exact argmin
    # inner: strict new prefix minima on [1, m*]
    prefix_min = np.minimum.accumulate(psi[: m_star + 1])  # [m* + 1]
    inner_rec = np.flatnonzero(psi[1 : m_star + 1] < prefix_min[:-1]) + 1
    # outer: suffix minima (ties included) on [m*, V]
    tail = psi[m_star:]
    suffix_min_after = np.full(tail.size, np.inf)  # [V - m* + 1]: min of psi after each position
    suffix_min_after[:-1] = np.minimum.accumulate(tail[:0:-1])[::-1]
    outer_rec = np.flatnonzero(tail <= suffix_min_after) + m_star
    is_record = np.zeros(V + 1, dtype=bool)  # [V + 1]
    is_record[[0, m_star, V]] = True
    is_record[inner_rec] = True
    is_record[outer_rec] = True
    records = np.flatnonzero(is_record)
    inner = records[1:] <= m_star
    return BlockCuts(order=order, psi=psi, m_star=m_star, records=records, inner=inner)
