"""Exact evaluation of a policy on a level-structured chain, and of every one-level change of it.

The chain of ``model._levels`` moves up by batches (at most k_max levels) and down one level at a time.
A policy changes only the rows of the generator that leave a level (the arrivals there), so the cost of
every policy that differs from the current one at a single level i follows from the chain *censored* on
level i (watched only while it is on level i): its generator is

    C_i = Q_{i,i} + sum_k Q_{i,i+k} Pi_{i+k -> i} + Q_{i,i-1} X_i,

where Pi_{j -> i} (j > i) is the law of the phase at first entry into level i from level j (it uses only
the rows of levels above i) and X_i that from level i - 1 (it uses only the rows of levels below i, and
of levels above i when a batch jumps over i). Neither depends on the rows of level i. The stationary
vector restricted to level i is proportional to that of C_i (the censored chain), and every rate of
interest, sum_s p_s f_s, is x_i (F_i + sum_k Q_{i,i+k} B_{i+k -> i} + Q_{i,i-1} B_{i-1 -> i}) / (same with
f = 1), with B the expected reward collected before first entry into level i. So a one-level change costs
a few products and one solve of the size of one level.

**Backward pass** (levels K..1, the paper's step 1 generalised): with Qbar_{l,l} = Q_{l,l} + sum_k Q_{l,l+k}
Pi_{l+k -> l},

    G_{l-1} = (-Qbar_{l,l})^{-1} Q_{l,l-1}                        = Pi_{l -> l-1}
    a_{l-1} = (-Qbar_{l,l})^{-1} (F_l + sum_k Q_{l,l+k} B_{l+k -> l}) = B_{l -> l-1}
    Pi_{j -> l-1} = Pi_{j -> l} G_{l-1},   B_{j -> l-1} = B_{j -> l} + Pi_{j -> l} a_{l-1}

It depends on the rows of levels >= l. Censored on level 0 it gives the policy's own rates (paper 000,
Section 3, steps 1-4, without the F recursion: only the rates are formed, never the whole vector).

**Forward pass** (levels 0..K-1): Z_l^(k) is the law of the first passage from level l into levels above l,
landing on level l + k; z_l the reward collected meanwhile:

    H_l = -Q_{l,l} - Q_{l,l-1} Z_{l-1}^(1)
    Z_l^(k) = H_l^{-1} (Q_{l,l+k} + Q_{l,l-1} Z_{l-1}^(k+1)),   z_l = H_l^{-1} (F_l + Q_{l,l-1} z_{l-1})

It depends on the rows of levels <= l. Then X_i = sum_k Z_{i-1}^(k) Pi_{i-1+k -> i} and
B_{i-1 -> i} = z_{i-1} + sum_k Z_{i-1}^(k) B_{i-1+k -> i}.

A change at level i invalidates the backward quantities below i and the forward ones from i on; both are
rebuilt lazily, one level at a time, so sweeping the levels upwards (or downwards) and accepting changes on
the way costs one pass per sweep. Every matrix here is a probability or an expected reward of an absorbing
chain, formed by the same stable recursions as the paper's G matrices.

The rates F (columns ``FUNCTIONALS``, and optionally one per level) are those of Section 4 of paper 000
(offered, lost, served, obsolete pages per second, eqs. (8), (9), (14), (15)), the starvation and robot
terms (eqs. (5), (6)), and the sojourn sums of Section 5 through the tagged page (Little's law on the
pages that will be served or will expire).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ._levels import LevelChain
from ._matrices import (
    INVERSE_LEAF,
    csr_from_dense,
    csr_times_dense,
    fast_kron,
    is_sparse,
    mmatrix_inverse,
    small_solve,
    to_dense,
)
from ._measures import Measures
from ._model import Costs

Array = NDArray[np.float64]

#: Generator blocks with at most this many entries are kept per (level, mode) once built.
SMALL_BLOCK = 1024
#: Inner operators with more entries than this, and at most this share of them non-zero, multiply sparse.
SPARSE_ABOVE = 4096
SPARSE_DENSITY = 0.1
#: Dense down-blocks Q_{i,i-1} with at most this many entries are kept with the chain.
KEEP_DOWN = 1 << 14
#: The rate columns of every mode are built together, when one is first asked for, on levels where the modes
#: times the states are at most this (a new mode in a static pass of a chain of small levels was two thirds
#: the building of its columns, one mode at a time).
ALL_MODES_STATES = 1 << 12
#: The rate columns every evaluation carries (then, optionally, P(level = i) for i = 0..K).
FUNCTIONALS = ("mass", "starvation", "robots", "offered", "lost", "served", "obsolete", "served_time",
               "obsolete_time", "will_serve", "will_expire", "queue_length")
_F = {name: k for k, name in enumerate(FUNCTIONALS)}
#: ``LevelChain.rate_columns`` order -> FUNCTIONALS[1:] order
_CHAIN_COLUMNS = ("starvation", "robots", "offered", "lost", "served", "obsolete", "will_serve", "will_expire",
                  "served_time", "obsolete_time", "queue_length")
_COLUMN_ORDER = [_CHAIN_COLUMNS.index(name) for name in FUNCTIONALS[1:]]


@dataclass(frozen=True)
class Rates:
    """The stationary rates of one policy, normalised (``mass`` = 1), as read from the columns."""

    values: Array
    levels: Array | None

    def __getitem__(self, name: str) -> float:
        return float(self.values[_F[name]])

    def cost(self, costs: Costs) -> float:
        return float(cost_from_rates(self.values, costs))

    def measures(self, robots_at_level: Sequence[int]) -> Measures:
        """The measures; without the level distribution (``levels=False``) the scalars are the same and the
        two distributions are empty."""
        if self.levels is not None:
            return Measures.from_rates(offered=self["offered"], lost=self["lost"], obsolete=self["obsolete"],
                                       served=self["served"], level_probabilities=self.levels,
                                       robots_at_level=tuple(robots_at_level), served_time=self["served_time"],
                                       obsolete_time=self["obsolete_time"])
        offered, served, obsolete = self["offered"], self["served"], self["obsolete"]
        v1 = self["served_time"] / served if served > 0 else float("nan")
        v2 = self["obsolete_time"] / obsolete if obsolete > 0 else 0.0
        return Measures(arrival_rate=offered, p_loss=self["lost"] / offered, p_obsolete=obsolete / offered,
                        p_success=served / offered, p_starvation=self["starvation"],
                        mean_active_robots=self["robots"], active_robots_distribution=(),
                        queue_length_distribution=(), mean_queue_length=self["queue_length"],
                        mean_response_served=v1, mean_sojourn_obsolete=v2,
                        mean_sojourn=v1 * served / offered + v2 * obsolete / offered)

    @property
    def consistency(self) -> float:
        """How far the two routes to the fates of pages disagree (relative): the rate of pages served
        (S_0 of the chain) against the rate of arriving pages that will be served (tagged page), and
        likewise for obsolete pages. Zero up to rounding for an exact chain."""
        v = self.values
        scale = max(float(v[_F["offered"]]), 1e-300)
        return max(abs(float(v[_F["served"]] - v[_F["will_serve"]])),
                   abs(float(v[_F["obsolete"]] - v[_F["will_expire"]]))) / scale


def cost_from_rates(values: Array, costs: Costs) -> Any:
    """J of eq. (2) from normalised rate columns (last axis): lambda (c_loss P_loss + c_obs P_obs) is
    c_loss lost + c_obs obsolete (pages per second), V^(1) = served_time / served."""
    v = np.asarray(values)
    response = v[..., _F["served_time"]] / v[..., _F["served"]]
    total = (costs.loss * v[..., _F["lost"]] + costs.obsolescence * v[..., _F["obsolete"]]
             + costs.robot * v[..., _F["robots"]] + costs.starvation * v[..., _F["starvation"]]
             + costs.response * response)
    return total


#: Levels of at least this many states, with at least twice as many right-hand sides, are solved through the
#: inverse (:func:`model._matrices.mmatrix_inverse`, then one matrix product): the triangular solves of many
#: right-hand sides run at a fraction of the speed of a product (measured 4.2 ms against 6.6 ms at 200
#: states and 812 columns through LAPACK's inverse; the inverse by halves is faster still).
WIDE_SOLVE_DIM = 64


def _solve_wide(H: Array, rhs: Array) -> Array:
    """H^{-1} rhs; through the inverse (:func:`model._matrices.mmatrix_inverse`) when rhs is wide and H large
    (``WIDE_SOLVE_DIM``). H is minus a generator block that loses probability to other levels (a non-singular
    M-matrix, diagonally dominant), for which the inverse is as accurate as the LU solve."""
    d = H.shape[0]
    if d >= WIDE_SOLVE_DIM and rhs.shape[1] >= 2 * d:
        return np.asarray(mmatrix_inverse(H) @ rhs)
    return small_solve(H, rhs) if d <= INVERSE_LEAF else np.asarray(np.linalg.solve(H, rhs))


def _stationary_batch(C: Array) -> Array:
    """x C = 0, x e = 1 for a stack of small irreducible generators C (n, d, d)."""
    A = C.copy()
    A[:, :, 0] = 1.0
    rhs = np.zeros((C.shape[0], C.shape[1], 1))
    rhs[:, 0, 0] = 1.0
    return np.asarray(np.linalg.solve(np.swapaxes(A, 1, 2), rhs)[:, :, 0], dtype=float)


class PolicyEvaluator:
    """Rates and costs of a policy on a :class:`LevelChain`, and of its one-level changes.

    Parameters
    ----------
    chain : LevelChain
    robots_at_level : sequence of int
        The current policy r(0..K) (any modes of the model, in any order: queue-length policies need not
        be monotone).
    levels : bool
        Also carry P(level = i) for i = 0..K (needed for :class:`Measures`; not for costs).
    """

    def __init__(self, chain: LevelChain, robots_at_level: Sequence[int], *, levels: bool = False) -> None:
        self.chain = chain
        K = self.K = chain.K
        self.policy = [int(r) for r in robots_at_level]
        if len(self.policy) != K + 1:
            raise ValueError(f"policy has {len(self.policy)} levels, K = {K} needs {K + 1}")
        self.levels = levels
        self.nf = len(FUNCTIONALS) + (K + 1 if levels else 0)
        self.W = chain.W
        self.kmax = max(chain.max_jump(m, 0) for m in chain.model.modes)
        self.dims = [chain.dim(i) for i in range(K + 1)]
        # dense pieces depend on the chain (and the mode), not on the policy: kept on the chain, shared by
        # every evaluator of it
        caches = chain.evaluator_caches
        self._dense: dict[tuple[str, int, int], Array] = caches.setdefault("dense", {})
        self._small: dict[tuple[Any, ...], Array] = caches.setdefault("small", {})
        # the small blocks kept, by content: levels whose blocks are equal share one array (at 128 modes and
        # K = 500, exponential obsolescence, every up-block of a mode above level 0 is the same D_1 (x) I:
        # 64,000 copies were 93 MB)
        self._shared: dict[tuple[tuple[int, ...], bytes], Array] = caches.setdefault("shared", {})
        # the rate columns only: with ``levels`` the K + 1 level columns are added per call, never cached
        # (cached, they were 128 modes x 501 levels x 513 columns: 1 GiB of a 2,004-state chain at K = 500)
        self._F: dict[tuple[int, int, int], Array] = caches.setdefault("F", {})
        # backward quantities "at l" (valid for l >= back_lo): PB[(j, l)] = [Pi_{j,l} | B_{j,l}] side by side, for
        # l < j <= l + kmax (kept as one array: each is multiplied whole, and the concatenations were a
        # copy of every Pi and B per level and batch size)
        self.PB: dict[tuple[int, int], Array] = {}
        self.back_lo = K
        # forward quantities (valid for l <= fwd_hi): Z[l][k - 1], z[l]
        self.Z: list[list[Array]] = [[] for _ in range(K + 1)]
        self.z: list[Array] = [np.zeros(0)] * (K + 1)
        self.fwd_hi = -1
        self.solves = 0

    # -- dense pieces -------------------------------------------------------------------------
    def _inner(self, kind: str, i: int, a: int = 0) -> Array:
        key = (kind, i, a)
        if key not in self._dense:
            c = self.chain
            m = c.A(i) if kind == "A" else c.down(i) if kind == "down" else c.up(i, a)
            self._dense[key] = to_dense(m)
        return self._dense[key]

    def _kron_arr(self, arr: Array, X: Array, inner: int) -> Array:
        """(arr (x) I_inner) X for one arr (W x W) or a stack (n, W, W); X is (W inner, cols)."""
        cols = X.shape[1]
        Y = arr @ X.reshape(self.W, inner * cols)
        return Y.reshape(*arr.shape[:-2], self.W * inner, cols)

    def _eye_kron(self, B: Any, X: Array) -> Array:
        """(I_W (x) B) X with B (p x q, dense or sparse) and X (W q, cols)."""
        cols = X.shape[1]
        p, q = B.shape
        if is_sparse(B):  # one product per block of rows (W side by side through transposes was 9 times slower)
            X = np.ascontiguousarray(X)
            out = np.zeros((self.W * p, cols))
            for w in range(self.W):
                csr_times_dense(B, X[w * q:(w + 1) * q], out[w * p:(w + 1) * p])
            return out
        return (B @ X.reshape(self.W, q, cols)).reshape(self.W * p, cols)

    def _inner_op(self, kind: str, i: int, a: int = 0) -> Any:
        """The inner operator ``down`` or ``up`` for products: sparse (CSR) when large and sparse (the ordered
        pages' operators have a few entries per row), else the dense block. Cached with the chain."""
        key = (kind + "_op", i, a)
        if key not in self._dense:
            dense = self._inner(kind, i, a)
            sparse = dense.size > SPARSE_ABOVE and np.count_nonzero(dense) <= SPARSE_DENSITY * dense.size
            self._dense[key] = csr_from_dense(dense) if sparse else dense
        return self._dense[key]

    def _inner_diag(self, i: int) -> Array:
        """I_W (x) A(i) (zero on level 0)."""
        key = ("IA", i, 0)
        if key not in self._dense:
            d = self.dims[i]
            self._dense[key] = np.zeros((d, d)) if i == 0 else fast_kron(np.eye(self.W), self._inner("A", i))
        return self._dense[key]

    def _diag(self, i: int, mode: int, scale: float = 1.0) -> Array:
        """``scale`` Q_{i,i} under ``mode``, as a new array the caller may write into. D_0-part (x) I adds
        W^2 diagonals to the kept I_W (x) A(i): they are added in place (forming the Kronecker product of
        the d x d identity cost as much as the rest of a level step on large levels)."""
        key = ("Qdiag", i, mode, self.chain.reach(mode, i))
        hit = self._small.get(key)
        if hit is not None:
            return hit * scale
        arr0 = self.chain.arrivals(mode, i)[0]
        inner = self.chain.inner_dim(i)
        if self.dims[i] ** 2 <= SMALL_BLOCK:
            return self._keep_small(key, fast_kron(arr0, np.eye(inner)) + self._inner_diag(i)) * scale
        out = self._inner_diag(i) * scale
        blocks = out.reshape(self.W, inner, self.W, inner)
        idx = np.arange(inner)
        blocks[:, idx, :, idx] += arr0 * scale  # out[(a, s), (b, s)] += scale arr0[a, b]
        return out

    def _keep_small(self, key: tuple[Any, ...], out: Array) -> Array:
        """Keep a small block under ``key``, as the array already kept with the same content if there is one
        (read-only: the passes never write into a kept block)."""
        out = np.ascontiguousarray(out)
        shared = self._shared.setdefault((out.shape, out.tobytes()), out)
        shared.flags.writeable = False
        self._small[key] = shared
        return shared

    def _up_block(self, i: int, mode: int, k: int) -> Array:
        """Q_{i,i+k} under ``mode``, dense (kept when small)."""
        key = ("Qup", i, mode, self.chain.reach(mode, i), k)
        hit = self._small.get(key)
        if hit is not None:
            return hit
        arr = self.chain.arrivals(mode, i)
        # (D_k (x) I_inner)(I_W (x) up) = D_k (x) up, formed directly (not as a product with an identity)
        out: Array = (np.zeros((self.dims[i], self.dims[i + k])) if k >= len(arr)
                      else fast_kron(arr[k], self._inner("up", i, k)))
        if out.size <= SMALL_BLOCK:
            out = self._keep_small(key, out)
        return out

    def _down_block(self, i: int) -> Array:
        """Q_{i,i-1} = I_W (x) down(i), kept up to ``KEEP_DOWN`` entries (a larger one is formed again, in
        O(d^2) next to the step's O(d^3): the 32 static fleets at K = 100 peaked at 646 MB instead of 674)."""
        key = ("Qdown", i, 0)
        hit = self._dense.get(key)
        if hit is not None:
            return hit
        out = fast_kron(np.eye(self.W), self._inner("down", i))
        if out.size <= KEEP_DOWN:
            self._dense[key] = out
        return out

    def _up(self, i: int, mode: int, k: int, X: Array) -> Array:
        """Q_{i,i+k} X under ``mode`` (zero when no batch admits k pages there)."""
        arr = self.chain.arrivals(mode, i)
        if k >= len(arr):
            return np.zeros((self.dims[i], X.shape[1]))
        return self._kron_arr(arr[k], self._eye_kron(self._inner_op("up", i, k), X), self.chain.inner_dim(i))

    def _down(self, i: int, X: Array) -> Array:
        return self._eye_kron(self._inner_op("down", i), X)

    def _times_down(self, i: int, X: Array, out: Array) -> None:
        """out = X Q_{i,i-1} = X (I_W (x) down(i)) for a dense X (rows x d_i), block column by block column:
        W products with the inner operator (sparse when large) instead of one with the dense block (the
        inverse of a backward step times the down-block was a third of the step's flops)."""
        dn = self._inner_op("down", i)
        p, q = dn.shape
        if is_sparse(dn):  # (down^T X_w^T)^T by the kept CSR transpose: scipy's X_w @ dn took twice as long
            key = ("down_t", i, 0)
            if key not in self._dense:
                self._dense[key] = sp.csr_matrix(dn.T)
            dn_t = self._dense[key]
            for w in range(self.W):
                out[:, w * q:(w + 1) * q] = (dn_t @ X[:, w * p:(w + 1) * p].T).T
            return
        rows = X.shape[0]
        blocks = np.matmul(X.reshape(rows, self.W, p).transpose(1, 0, 2), dn)  # (W, rows, q)
        out[...] = blocks.transpose(1, 0, 2).reshape(rows, self.W * q)

    def functionals(self, i: int, mode: int) -> Array:
        """F_i under ``mode``: d_i x nf rates (columns ``FUNCTIONALS``, then the levels), a new array."""
        return self.functionals_of(i, [mode])[0]

    def functionals_of(self, i: int, modes: Sequence[int]) -> Array:
        """F_i under each of ``modes`` (n_modes x d_i x nf); the modes not yet kept are built together
        (``LevelChain.rate_columns_of``)."""
        keys = [(i, m, self.chain.reach(m, i)) for m in modes]
        missing = [key for key in dict.fromkeys(keys) if key not in self._F]
        if missing and len(self.chain.model.modes) * self.dims[i] <= ALL_MODES_STATES:
            # a small level: every mode's at once (a search asks for them all, one at a time in static passes)
            every = [(i, m, self.chain.reach(m, i)) for m in self.chain.model.modes]
            missing = [key for key in dict.fromkeys(every + missing) if key not in self._F]
        if missing:
            built = np.empty((len(missing), self.dims[i], len(FUNCTIONALS)))
            built[..., 0] = 1.0  # mass
            built[..., 1:] = self.chain.rate_columns_of([m for _, m, _ in missing], i)[..., _COLUMN_ORDER]
            for key, F0 in zip(missing, built):
                self._F[key] = F0
        out = np.zeros((len(modes), self.dims[i], self.nf))
        for k, key in enumerate(keys):
            out[k, :, :len(FUNCTIONALS)] = self._F[key]
        if self.levels:
            out[:, :, len(FUNCTIONALS) + i] = 1.0
        return out

    # -- passes -------------------------------------------------------------------------------
    def _reach(self, i: int) -> int:
        return min(self.kmax, self.K - i)

    def _close(self, l: int) -> None:
        """Backward step: from the quantities at l, those at l - 1 (needs rows of levels >= l)."""
        mode = self.policy[l]
        top = self._reach(l)
        Qbar = self._diag(l, mode)
        rhs_B = self.functionals(l, mode)
        d = self.dims[l]
        for k in range(1, top + 1):
            # Q_{l,l+k} [Pi | B]: one product for both
            PB = self.PB[l + k, l]
            small = d * self.dims[l + k] <= SMALL_BLOCK
            QPB = self._up_block(l, mode, k) @ PB if small else self._up(l, mode, k, PB)
            Qbar += QPB[:, :d]
            rhs_B += QPB[:, d:]
        Qbar *= -1.0
        width = self.dims[l - 1]
        if d <= INVERSE_LEAF:
            both = small_solve(Qbar, np.concatenate([self._down_block(l), rhs_B], axis=1))
        else:  # [G | a] = (-Qbar)^{-1} [Q_{l,l-1} | rhs_B], G through the down-block's structure
            inverse = mmatrix_inverse(Qbar)
            both = np.empty((d, width + rhs_B.shape[1]))
            self._times_down(l, inverse, both[:, :width])
            np.matmul(inverse, rhs_B, out=both[:, width:])
        self.solves += 1
        self.PB[l, l - 1] = both
        for j in range(l + 1, min(l - 1 + self._reach(l - 1), self.K) + 1):
            # Pi_{j,l} [G | a] in one product: [Pi_{j,l-1} | B_{j,l-1} - B_{j,l}]
            PB = self.PB[j, l]
            moved = PB[:, :d] @ both
            moved[:, width:] += PB[:, d:]
            self.PB[j, l - 1] = moved

    def _ensure_back(self, l: int) -> None:
        while self.back_lo > l:
            self._close(self.back_lo)
            self.back_lo -= 1

    def _open(self, l: int) -> None:
        """Forward step: Z_l, z_l (needs rows of levels <= l)."""
        mode = self.policy[l]
        top = self._reach(l)
        H = self._diag(l, mode, -1.0)
        rhs_z = self.functionals(l, mode)
        if l > 0:
            Zp = self.Z[l - 1]
            if Zp:
                H -= self._down(l, Zp[0])
            rhs_z += self._down(l, self.z[l - 1])
        rhs_list = []
        for k in range(1, top + 1):
            rhs = self._up_block(l, mode, k)
            if l > 0 and k < len(self.Z[l - 1]):
                rhs = rhs + self._down(l, self.Z[l - 1][k])
            rhs_list.append(rhs)
        rhs_all = np.concatenate([*rhs_list, rhs_z], axis=1)
        sol = _solve_wide(H, rhs_all)
        self.solves += 1
        Zl, at = [], 0
        for k in range(1, top + 1):
            width = self.dims[l + k]
            Zl.append(sol[:, at:at + width])
            at += width
        self.Z[l] = Zl
        self.z[l] = sol[:, at:]

    def _ensure_fwd(self, l: int) -> None:
        while self.fwd_hi < l:
            self.fwd_hi += 1
            self._open(self.fwd_hi)

    # -- evaluation ---------------------------------------------------------------------------
    def _censored_parts(self, i: int) -> tuple[Array, list[Array], Array]:
        """Mode-independent pieces of C_i and of its reward at level i: (base, [PU_k | BU_k], DB), the
        products for Pi and B side by side (one product each instead of two: most of a one-level change
        on small levels is call overhead)."""
        self._ensure_back(i)
        d = self.dims[i]
        base = self._inner_diag(i)
        DB = np.zeros((d, self.nf))
        if i > 0:
            self._ensure_fwd(i - 1)
            Zp, zp = self.Z[i - 1], self.z[i - 1]
            XB = np.empty((self.dims[i - 1], d + self.nf))  # [X | B_{i-1 -> i}]
            XB[:, :d] = 0.0
            XB[:, d:] = zp
            for k, Zk in enumerate(Zp, start=1):
                if k == 1:
                    XB[:, :d] += Zk
                else:
                    XB += Zk @ self.PB[i - 1 + k, i]
            moved = self._down(i, XB)
            base = base + moved[:, :d]
            DB = moved[:, d:]
        PBU = [self._eye_kron(self._inner_op("up", i, k), self.PB[i + k, i]) for k in range(1, self._reach(i) + 1)]
        return base, PBU, DB

    def rates_at(self, i: int, modes: Sequence[int]) -> Array:
        """Normalised rate columns (n_modes x nf) of the policies equal to the current one except that
        level i runs each of ``modes``."""
        base, PBU, DB = self._censored_parts(i)
        c = self.chain
        inner = c.inner_dim(i)
        n = len(modes)
        d = self.dims[i]
        arrs = [c.arrivals(m, i) for m in modes]
        stack0 = np.stack([a[0] for a in arrs])
        C = self._kron_arr(stack0, np.eye(d), inner) + base
        T = self.functionals_of(i, modes) + DB
        for k in range(1, len(PBU) + 1):
            stack = np.stack([a[k] if k < len(a) else np.zeros((self.W, self.W)) for a in arrs])
            if not stack.any():
                continue
            moved = self._kron_arr(stack, PBU[k - 1], inner)
            C += moved[..., :d]
            T += moved[..., d:]
        x = _stationary_batch(C.reshape(n, d, d))
        self.solves += n
        y = np.einsum("nd,ndf->nf", x, T.reshape(n, d, self.nf))
        return np.asarray(y / y[:, [_F["mass"]]])

    def rates(self) -> Rates:
        """The current policy's rates (censored on level 0)."""
        y = self.rates_at(0, [self.policy[0]])[0]
        levels = y[len(FUNCTIONALS):] if self.levels else None
        return Rates(y[:len(FUNCTIONALS)], levels)

    def static_rates(self, modes: Sequence[int]) -> Array:
        """The normalised rate columns (n_modes x ``FUNCTIONALS``, then P(level) with ``levels``) of the static
        fleets r(i) = m, one per mode m, in one backward pass over the levels with the fleets stacked: the
        recursion of :meth:`_close` (the module docstring's backward pass, Pi and B for every fleet at once),
        censored on level 0 as :meth:`rates` does. On a chain of small levels (e.g. the exponential
        surrogate's, 4 states a level) one pass per fleet is mostly call overhead: 16 fleets at K = 50 cost
        about what two passes did. The current policy and its passes are left as they were."""
        ms = [int(m) for m in modes]
        n, K, W = len(ms), self.K, self.W
        PB: dict[tuple[int, int], Array] = {}  # [Pi_{j,l} | B_{j,l}] of every fleet (n x dim(j) x ...)

        def level(l: int) -> tuple[Array, Array, list[Array]]:
            """Q_{l,l} and F_l of every fleet, and the arrivals' stacks D_k (n x W x W), k >= 1."""
            arrs = [self.chain.arrivals(m, l) for m in ms]
            inner = self.chain.inner_dim(l)
            Q = self._kron_arr(np.stack([a[0] for a in arrs]), np.eye(self.dims[l]), inner) + self._inner_diag(l)
            stacks = [np.stack([a[k] if k < len(a) else np.zeros((W, W)) for a in arrs])
                      for k in range(1, self._reach(l) + 1)]
            return Q, self.functionals_of(l, ms), stacks

        def up(l: int, k: int, D: Array, X: Array) -> Array:
            """Q_{l,l+k} X for every fleet: (D_k (x) I)(I_W (x) up(l, k)) X, X stacked (n x dim(l + k) x c)."""
            U = self._inner("up", l, k)
            p, q = U.shape
            c = X.shape[2]
            Y = U @ X.reshape(n, W, q, c)
            return np.asarray(D @ Y.reshape(n, W, p * c)).reshape(n, W * p, c)

        for l in range(K, 0, -1):
            Qbar, rhs, stacks = level(l)
            d = self.dims[l]
            for k, D in enumerate(stacks, start=1):
                if D.any():
                    moved = up(l, k, D, PB[l + k, l])
                    Qbar += moved[..., :d]
                    rhs += moved[..., d:]
            down = self._down_block(l)
            width = down.shape[1]
            both = np.linalg.solve(-Qbar, np.concatenate([np.broadcast_to(down, (n, *down.shape)), rhs], axis=2))
            PB[l, l - 1] = both
            for j in range(l + 1, min(l - 1 + self._reach(l - 1), K) + 1):
                moved = PB[j, l][..., :d] @ both
                moved[..., width:] += PB[j, l][..., d:]
                PB[j, l - 1] = moved
            for k in range(1, self._reach(l) + 1):  # no longer needed: the levels below use PB[., l - 1]
                del PB[l + k, l]
        C, T, stacks = level(0)
        d = self.dims[0]
        for k, D in enumerate(stacks, start=1):
            if D.any():
                moved = up(0, k, D, PB[k, 0])
                C += moved[..., :d]
                T += moved[..., d:]
        x = _stationary_batch(C)
        self.solves += n * (K + 1)
        y = np.einsum("nd,ndf->nf", x, T)
        return np.asarray(y / y[:, [_F["mass"]]])

    def costs_at(self, i: int, modes: Sequence[int], costs: Costs) -> Array:
        """J of each one-level change (level i to each of ``modes``)."""
        return np.asarray(cost_from_rates(self.rates_at(i, modes)[:, :len(FUNCTIONALS)], costs))

    def set_mode(self, i: int, mode: int) -> None:
        """Change the current policy at level i (the passes are rebuilt lazily)."""
        if self.policy[i] == mode:
            return
        self.policy[i] = int(mode)
        self.back_lo = max(self.back_lo, i)
        self.fwd_hi = min(self.fwd_hi, i - 1)

    def set_policy(self, robots_at_level: Sequence[int]) -> None:
        for i, m in enumerate(robots_at_level):
            self.set_mode(i, m)

    def evaluate(self, robots_at_level: Sequence[int]) -> Rates:
        """The rates of any policy: the changes from the current one are applied and the chain is censored
        on the highest level changed, so that only the levels between the lowest and the highest change
        are passed again (enumerations that change the upper levels fastest are cheap)."""
        changed = [i for i, m in enumerate(robots_at_level) if self.policy[i] != m]
        self.set_policy(robots_at_level)
        # nothing changed: the top or the bottom, whichever has its passes (a new evaluator: the backward pass,
        # whose solves are narrower than the forward pass's)
        at = self._cheapest_censor(changed[0], changed[-1]) if changed else self._cheapest_censor(0, self.K)
        y = self.rates_at(at, [self.policy[at]])[0]
        return Rates(y[:len(FUNCTIONALS)], y[len(FUNCTIONALS):] if self.levels else None)

    def _cheapest_censor(self, lo: int, hi: int) -> int:
        """``lo`` or ``hi``, whichever needs the less work to censor on: the levels still to pass, weighted
        by d^3 and, forward, by the wider solve (a forward step solves for the up-blocks, about k_max times
        the columns of a backward one; measured 1.4 s against 1.2 s for 16 static fleets at K = 50)."""
        def work(t: int) -> float:
            fwd = sum(self.dims[l] ** 3 for l in range(self.fwd_hi + 1, t))
            back = sum(self.dims[l] ** 3 for l in range(t + 1, self.back_lo + 1))
            return 1.2 * fwd + back
        return lo if work(lo) < work(hi) else hi

    def cost(self, robots_at_level: Sequence[int], costs: Costs) -> float:
        """J of any policy (:meth:`evaluate`)."""
        return self.evaluate(robots_at_level).cost(costs)
