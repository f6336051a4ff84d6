"""Exact stationary solution of the controlled queue under one policy (paper 000, Sections 3, 4 and 6).

Methods (all exact up to floating point; the result names the one used):

``block``
    The paper's algorithm of Section 3 (after Klimenok et al.): G_i by backward recursion, the
    Q-bar_{i,l}, then F_l and p_i = p_0 F_i. Works level by level on dense blocks of one or two levels.
``qbd``
    Section 6: the same recursion when arrivals come one at a time, so the generator is block
    tridiagonal and each step touches three blocks.
``sparse``
    The whole generator assembled sparse from the Kronecker blocks and solved by sparse LU (SuperLU).
    Kept as an independent route; it fills in as badly as the dense blocks.
``iterative``
    GMRES with a block Gauss-Seidel preconditioner whose level solves invert each level's Kronecker sum
    axis by axis (``model._iterative``): no block larger than a vector is formed. The exact reference for
    large K (K = 16 with W = M = R = 2: 262,142 states in seconds); its residual is measured afterwards.
``auto``
    ``iterative`` when the largest level has more than ``ITERATIVE_ABOVE`` states, else ``qbd`` when it
    applies, else ``block``.

**No traceback when the iterative method stalls.** When GMRES does not reach the residual asked for, or a
tagged-page solve stalls, ``solve`` falls back to the ordered-head approximation with its error bar
(:func:`model.solve_approx`, within ``FALLBACK_SECONDS``), and the result says so: ``method`` is
``approx``, ``message`` names the stall and the depth used, ``error_bound`` is the largest error bar of
the scalar measures, ``measure_errors`` each one's, and ``budget_exhausted`` is True when the ladder's
time ran out before its tolerance was met. (A direct fallback, sparse LU on the whole chain, was measured
slower than 250 s on the 13,122-state Erlang-3 chain below, where the approximation takes seconds.)

Every method first reduces the model exactly (:func:`model.reduce_model`) unless ``reduce=False``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._blocks import Blocks, Matrix, PreparedModel, to_dense
from ._measures import Measures
from ._model import QueueModel
from ._policy import QueueLengthPolicy
from ._reduce import reduce_model
from ._sojourn import tagged_totals

METHODS = ("auto", "block", "qbd", "sparse", "iterative")
#: Exact solves of larger chains are refused (the iterative method keeps about 40 vectors of this size);
#: :func:`model.solve_approx` evaluates such models with an error bar.
EXACT_STATE_LIMIT = 3_000_000
#: ``auto`` uses the iterative method above this many states in one level: measured on the paper example
#: with two-phase obsolescence (bench/scale.py), the dense block algorithm took 2.4 s at K = 10 (2048
#: states per level) against 0.4 s, and the gap grows like R^(2K).
ITERATIVE_ABOVE = 1024
#: ``auto`` leaves the dense block algorithm for sparse LU above this many states in one level. Measured on
#: the paper example with two-phase obsolescence (bench/model_core.py): sparse LU fills in as badly and was
#: slower at every size tried (K = 10: 5.4 s against 2.1 s; K = 11: 87 s against 25 s), so the switch only
#: guards memory: a dense block of 16384 x 16384 states is 2 GiB.
DENSE_LIMIT = 16384
#: Time budget of the approximation a stalled iterative solve falls back to.
FALLBACK_SECONDS = 60.0


class SolveStatus(enum.Enum):
    """Outcome of a solve."""

    SUCCESS = 0
    #: the stationary vector does not satisfy p Q = 0 to the requested tolerance
    INACCURATE = 1
    #: a linear solve failed (singular block)
    SINGULAR = 2


STATUS_MESSAGES = {
    SolveStatus.SUCCESS: "solved",
    SolveStatus.INACCURATE: "residual of p Q = 0 above tolerance",
    SolveStatus.SINGULAR: "a block of the generator is singular",
}


@dataclass(frozen=True, eq=False)
class Solution:
    """Exact stationary solution for one policy.

    Attributes
    ----------
    success : bool
        ``status is SolveStatus.SUCCESS``.
    status : SolveStatus
    message : str
    method : str
        ``block``, ``qbd``, ``sparse`` (or ``bruteforce`` from the independent route).
    policy : QueueLengthPolicy
    measures : Measures
    level_vectors : tuple of ndarray
        p_i for i = 0..K, in the state order of :class:`model._blocks.Blocks` for the model solved (the
        reduced one when ``reduction`` is not empty).
    n_states : int
    residual : float
        max |p Q| over all states.
    seconds : float
        Wall time of the solve.
    reduction : tuple of str
        The exact reductions made before solving (:func:`reduce_model`); empty when none applied.
    error_bound : float
        0 for an exact method; for the ``approx`` fallback the largest error bar of the scalar measures.
    measure_errors : dict of str to float
        The fallback's error bar of each scalar measure (empty for an exact method).
    budget_exhausted : bool
        True when the fallback's time budget ran out before its tolerance was met.
    """

    success: bool
    status: SolveStatus
    message: str
    method: str
    policy: QueueLengthPolicy
    measures: Measures
    level_vectors: tuple[NDArray[np.float64], ...]
    n_states: int
    residual: float
    seconds: float
    reduction: tuple[str, ...] = ()
    error_bound: float = 0.0
    measure_errors: dict[str, float] = field(default_factory=dict)
    budget_exhausted: bool = False


def solve(model: QueueModel, policy: QueueLengthPolicy, *, method: str = "auto",
          dense_limit: int = DENSE_LIMIT, tol: float = 1e-9, prepared: PreparedModel | None = None,
          reduce: bool = True) -> Solution:
    """Stationary distribution and measures of ``model`` under ``policy``.

    Parameters
    ----------
    model, policy
        The policy must have K + 1 levels and use only modes the arrivals define; it need not be
        monotone.
    method
        One of ``auto``, ``block``, ``qbd``, ``sparse`` (see the module docstring).
    dense_limit
        With ``auto``: largest level size for the dense block algorithm.
    tol
        Residual max |p Q| above which the result has ``status=INACCURATE``.
    prepared
        The policy-independent blocks of ``model`` (:func:`prepare`), reused across policies.
    reduce
        Solve the exactly reduced model (:func:`reduce_model`: lumped phases); the measures are the
        same, the chain smaller.

    References
    ----------
    Avrachenkov, Dudin, Klimenok, Nain, Semenova, "Optimal threshold control by the robots of web
    search engines with obsolescence of documents", Sections 3-6.

    Examples
    --------
    M/M/1/3: Poisson arrivals at 1 page/s with one robot, exponential service at 2 per second, K = 3.
    The loss probability has the closed form (1 - rho) rho^K / (1 - rho^(K+1)), rho = 1/2:

    >>> import numpy as np
    >>> from robotctl.model import BMAP, PH, ModeArrivals, QueueModel, ThresholdPolicy, solve
    >>> arrivals = ModeArrivals.per_mode({1: BMAP((np.array([[-1.0]]), np.array([[1.0]])))})
    >>> sol = solve(QueueModel(3, arrivals, PH.exponential(2.0)), ThresholdPolicy.static(1, 3))
    >>> sol.success, sol.method
    (True, 'qbd')
    >>> rho = 0.5
    >>> abs(sol.measures.p_loss - (1 - rho) * rho**3 / (1 - rho**4)) < 1e-12
    True
    >>> [round(p, 4) for p in sol.measures.queue_length_distribution]
    [0.5333, 0.2667, 0.1333, 0.0667]
    """
    if method not in METHODS:
        raise InputError("method", f"unknown solver method {method!r}", f"use one of {', '.join(METHODS)}")
    start = time.perf_counter()
    model.check_policy(policy)
    notes: tuple[str, ...] = ()
    if prepared is not None and prepared.original is model:
        model, notes = prepared.model, prepared.reduction
    elif reduce and prepared is None:
        red = reduce_model(model)
        model, notes = red.model, red.notes
    states = _state_count(model)  # in floating point: R^(K-1) as an integer takes minutes to sum at K = 10^6
    if states > EXACT_STATE_LIMIT:
        raise InputError("model", f"the exact chain has {states:.3g} states (it grows like R^(K-1) with R "
                         f"obsolescence phases), more than {EXACT_STATE_LIMIT:,} an exact solve may take",
                         "evaluate it with an error bar: robotctl solve --approx, or model.solve_approx")
    blocks = Blocks(model, policy, prepared)
    if method == "auto" and blocks.dim(blocks.K) > ITERATIVE_ABOVE:
        method = "iterative"
    if method == "iterative":
        return _solve_iterative(model, policy, tol, notes, start)
    if method == "auto":
        if blocks.is_qbd():
            method = "qbd"
        elif blocks.dim(blocks.K) <= dense_limit:
            method = "block"
        else:
            method = "sparse"
    elif method == "qbd" and not blocks.is_qbd():
        raise InputError("method", "qbd needs arrivals one page at a time at every level",
                         "use method block or auto for batch arrivals")
    try:
        if method == "qbd":
            p = _stationary_qbd(blocks)
        elif method == "block":
            p = _stationary_block(blocks)
        else:
            p = _stationary_sparse(blocks)
    except (np.linalg.LinAlgError, RuntimeError, ValueError) as exc:
        K = blocks.K
        empty = tuple(np.full(blocks.dim(i), np.nan) for i in range(K + 1))
        return _failed(model, policy, method, blocks, empty, f"{STATUS_MESSAGES[SolveStatus.SINGULAR]}: {exc}",
                       time.perf_counter() - start)
    residual = _residual(blocks, p)
    measures = measures_from_levels(blocks, p)
    status = SolveStatus.SUCCESS if residual <= tol else SolveStatus.INACCURATE
    message = STATUS_MESSAGES[status] if status is SolveStatus.SUCCESS else (
        f"{STATUS_MESSAGES[status]}: {residual:.3g} > {tol:g}")
    return Solution(status is SolveStatus.SUCCESS, status, message, method, policy, measures, p,
                    blocks.n_states, residual, time.perf_counter() - start, notes)


def _solve_iterative(model: QueueModel, policy: QueueLengthPolicy, tol: float, notes: tuple[str, ...],
                     start: float) -> Solution:
    """The ``iterative`` method on the exact level chain (whose state order is that of Blocks)."""
    from ._evaluate import FUNCTIONALS, Rates
    from ._iterative import rates_from_levels, stationary_iterative
    from ._levels import LevelChain

    chain = LevelChain(model)
    res = stationary_iterative(chain, policy.robots_at_level, rtol=min(1e-13, tol * 1e-4))
    if res.residual > tol:
        return _fallback(model, policy, f"the iterative solve stalled at residual {res.residual:.2g} > {tol:g} "
                         f"after {res.iterations} iterations", notes, start)
    try:
        y = rates_from_levels(chain, policy.robots_at_level, res.level_vectors)
    except (ArithmeticError, np.linalg.LinAlgError) as exc:
        return _fallback(model, policy, str(exc), notes, start)
    measures = Rates(y[:len(FUNCTIONALS)], y[len(FUNCTIONALS):]).measures(policy.robots_at_level)
    ok = res.residual <= tol
    status = SolveStatus.SUCCESS if ok else SolveStatus.INACCURATE
    message = (f"solved in {res.iterations} iterations" if ok else
               f"{STATUS_MESSAGES[SolveStatus.INACCURATE]}: {res.residual:.3g} > {tol:g} after {res.iterations} "
               "iterations")
    return Solution(ok, status, message, "iterative", policy, measures, res.level_vectors, chain.n_states,
                    res.residual, time.perf_counter() - start, notes)


def _fallback(model: QueueModel, policy: QueueLengthPolicy, reason: str, notes: tuple[str, ...],
              start: float) -> Solution:
    """The ordered-head approximation with its error bar, for a stalled iterative solve (module docstring)."""
    from ._approx import solve_approx

    left = max(FALLBACK_SECONDS - (time.perf_counter() - start), 5.0)
    try:
        approx = solve_approx(model, policy, max_seconds=left)
    except (ArithmeticError, np.linalg.LinAlgError, ValueError) as exc:
        nan = float("nan")
        m = Measures(nan, nan, nan, nan, nan, nan, (), (), nan, nan, nan, nan)
        return Solution(False, SolveStatus.SINGULAR, f"{reason}; the approximation failed too: {exc}", "approx",
                        policy, m, (), 0, nan, time.perf_counter() - start, notes, math.inf)
    errors = {k: float(v) for k, v in approx.measure_errors.items()}
    bound = max(errors.values(), default=0.0)
    message = (f"{reason}; fell back to the {approx.method} approximation: {approx.message}, largest measure "
               f"error bar {bound:.3g}")
    status = SolveStatus.SUCCESS if approx.success else SolveStatus.INACCURATE
    return Solution(approx.success, status, message, "approx", policy, approx.measures, (), approx.n_states,
                    math.nan, time.perf_counter() - start, notes, bound, errors, approx.budget_exhausted)


def _state_count(model: QueueModel) -> float:
    """States of the exact chain, W + W M (1 + R + ... + R^(K-1)), as a float (``inf`` past one)."""
    W, M, K = model.arrivals.order, model.service.order, model.capacity
    R = 1 if model.obsolescence is None else model.obsolescence.order
    try:
        return W + W * M * (float(K) if R == 1 else (float(R) ** K - 1.0) / (R - 1))
    except OverflowError:
        return math.inf


def _failed(model: QueueModel, policy: QueueLengthPolicy, method: str, blocks: Blocks,
            p: tuple[NDArray[np.float64], ...], message: str, seconds: float) -> Solution:
    nan = float("nan")
    m = Measures(nan, nan, nan, nan, nan, nan, (), tuple(nan for _ in range(blocks.K + 1)), nan, nan, nan, nan)
    return Solution(False, SolveStatus.SINGULAR, message, method, policy, m, p, blocks.n_states, nan, seconds)


def prepare(model: QueueModel, *, reduce: bool = True) -> PreparedModel:
    """The policy-independent blocks of ``model`` (of its exact reduction, with ``reduce``), to pass as
    ``solve(..., prepared=...)`` when solving many policies of one model."""
    if not reduce:
        return PreparedModel(model)
    red = reduce_model(model)
    return PreparedModel(red.model, original=model, reduction=red.notes)


def _dense(block: Matrix | None, shape: tuple[int, int]) -> NDArray[np.float64]:
    return np.zeros(shape) if block is None else to_dense(block)


def _normalise_p0(Q00bar: NDArray[np.float64], weights: NDArray[np.float64]) -> NDArray[np.float64]:
    """p_0 Qbar_00 = 0 with p_0 . weights = 1 (one equation replaced by the normalisation)."""
    A = Q00bar.copy()
    A[:, 0] = weights
    rhs = np.zeros(A.shape[0])
    rhs[0] = 1.0
    return np.asarray(np.linalg.solve(A.T, rhs))


def _stationary_block(b: Blocks) -> tuple[NDArray[np.float64], ...]:
    """Paper 000, Section 3, steps 1-5.

    Q-bar_{i,l} = Q_{i,l} + Q-bar_{i,l+1} G_l is zero whenever no batch reaches from level i to level
    l or beyond, so each row keeps only its non-zero blocks (``None`` for zero): the work grows like
    K times the largest batch, not K^2.
    """
    K = b.K
    jump = b.max_jump()  # Qbar_{i,l} = 0 for l > i + jump
    dims = [b.dim(i) for i in range(K + 1)]
    G: list[NDArray[np.float64]] = [np.zeros((0, 0))] * K
    Qbar: dict[tuple[int, int], NDArray[np.float64] | None] = {}
    lu_H: list[tuple[NDArray[np.float64], NDArray[np.int32]] | None] = [None] * (K + 1)

    def qbar_row(i: int) -> None:
        """Qbar_{i,l} = Q_{i,l} + Qbar_{i,l+1} G_l for l = top .. i (step 2); zero above the level
        ``top`` that the largest batch reaches from level i."""
        top = min(K, i + b.prepared.max_jump(b.mode(i), i))
        blk = b.Q(i, top)
        Qbar[i, top] = None if blk is None else to_dense(blk)
        for l in range(top - 1, i - 1, -1):
            above = Qbar[i, l + 1]
            blk = b.Q(i, l)
            if above is None:
                Qbar[i, l] = None if blk is None else to_dense(blk).copy()
                continue
            acc = above @ G[l]
            if blk is not None:
                acc += to_dense(blk)
            Qbar[i, l] = acc

    # Step 1: G_i = (-Qbar_{i+1,i+1})^{-1} Q_{i+1,i}, i = K-1..0
    for i in range(K - 1, -1, -1):
        qbar_row(i + 1)
        diag = Qbar[i + 1, i + 1]
        assert diag is not None
        lu = la.lu_factor(-diag)
        lu_H[i + 1] = lu
        G[i] = la.lu_solve(lu, _dense(b.Q(i + 1, i), (dims[i + 1], dims[i])))
    qbar_row(0)
    # Step 3: F_0 = I, F_l = sum_{i<l} F_i Qbar_{i,l} (-Qbar_{l,l})^{-1}
    F: list[NDArray[np.float64]] = [np.eye(dims[0])]
    for l in range(1, K + 1):
        acc = np.zeros((dims[0], dims[l]))
        for i in range(max(0, l - jump), l):
            q = Qbar.get((i, l))
            if q is not None:
                acc += F[i] @ q
        lu = lu_H[l]
        assert lu is not None
        F.append(la.lu_solve(lu, acc.T, trans=1).T)
    # Steps 4-5
    weights = sum((Fl.sum(axis=1) for Fl in F), np.zeros(dims[0]))
    q00 = Qbar[0, 0]
    assert q00 is not None
    p0 = _normalise_p0(q00, weights)
    return tuple(np.asarray(p0 @ Fl) for Fl in F)


def _stationary_qbd(b: Blocks) -> tuple[NDArray[np.float64], ...]:
    """Paper 000, Section 6: G_i = [-(Q_{i+1,i+1} + Q_{i+1,i+2} G_{i+1})]^{-1} Q_{i+1,i};
    F_i = F_{i-1} Q_{i-1,i} [-(Q_{i,i} + Q_{i,i+1} G_i)]^{-1}."""
    K = b.K
    dims = [b.dim(i) for i in range(K + 1)]
    G: list[NDArray[np.float64]] = [np.zeros(0)] * K
    lus: list[tuple[NDArray[np.float64], NDArray[np.int32]] | None] = [None] * (K + 1)
    for i in range(K - 1, -1, -1):
        H = -_dense(b.Q(i + 1, i + 1), (dims[i + 1], dims[i + 1]))
        if i + 2 <= K:
            up = b.Q(i + 1, i + 2)
            if up is not None:
                H -= up @ G[i + 1]
        lus[i + 1] = la.lu_factor(H)
        G[i] = la.lu_solve(lus[i + 1], _dense(b.Q(i + 1, i), (dims[i + 1], dims[i])))
    Q00bar = _dense(b.Q(0, 0), (dims[0], dims[0]))
    up0 = b.Q(0, 1)
    if up0 is not None:
        Q00bar = Q00bar + up0 @ G[0]
    F: list[NDArray[np.float64]] = [np.eye(dims[0])]
    for i in range(1, K + 1):
        up = b.Q(i - 1, i)
        if up is None:
            F.append(np.zeros((dims[0], dims[i])))
            continue
        acc = np.asarray(F[i - 1] @ up) if not sp.issparse(up) else np.asarray((up.T @ F[i - 1].T).T)
        lu = lus[i]
        assert lu is not None
        F.append(la.lu_solve(lu, acc.T, trans=1).T)
    weights = sum((Fl.sum(axis=1) for Fl in F), np.zeros(dims[0]))
    p0 = _normalise_p0(Q00bar, weights)
    return tuple(np.asarray(p0 @ Fl) for Fl in F)


def _stationary_sparse(b: Blocks) -> tuple[NDArray[np.float64], ...]:
    """p Q = 0, p e = 1 by sparse LU on the assembled generator (last equation replaced)."""
    Q = b.full()
    n = Q.shape[0]
    A = Q.T.tolil()
    A[n - 1, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[n - 1] = 1.0
    x = spla.splu(A.tocsc()).solve(rhs)
    out = []
    start = 0
    for i in range(b.K + 1):
        out.append(x[start:start + b.dim(i)])
        start += b.dim(i)
    return tuple(out)


def _residual(b: Blocks, p: tuple[NDArray[np.float64], ...]) -> float:
    worst = abs(sum(float(x.sum()) for x in p) - 1.0)
    jump = b.max_jump()  # Q_{i,j} = 0 for j > i + jump: O(K jump) blocks, not O(K^2)
    for j in range(b.K + 1):
        acc = np.zeros(b.dim(j))
        for i in range(max(0, j - jump), min(b.K, j + 1) + 1):
            blk = b.Q(i, j)
            if blk is not None:
                acc += blk.T @ p[i]
        worst = max(worst, float(np.abs(acc).max()))
    return worst


def measures_from_levels(b: Blocks, p: tuple[NDArray[np.float64], ...]) -> Measures:
    """Measures of Section 4 (eqs. (5)-(15)) and the mean sojourn times of Corollary 1."""
    K, W, M, R = b.K, b.W, b.M, b.R
    model = b.model
    # marginal of nu at each level
    nu_marg = [p[i].reshape(W, -1).sum(axis=1) for i in range(K + 1)]
    level_prob = np.array([float(x.sum()) for x in p])
    offered = lost = commands = 0.0
    for i in range(K + 1):
        bmap = model.arrivals[b.mode(i)]
        for k, Dk in enumerate(bmap.D[1:], start=1):
            batch_rate = float(nu_marg[i] @ Dk.sum(axis=1))
            offered += k * batch_rate
            admitted = model.admission.admitted(k, K - i)
            lost += (k - admitted) * batch_rate
            # a batch that moves the queue from i to i + admitted parks or resumes |r(i + a) - r(i)| robots
            commands += abs(b.mode(i + admitted) - b.mode(i)) * batch_rate
    served = 0.0
    obsolete = 0.0
    # expiry = Gamma_0^{(+)(i-1)} e: the total expiry rate of the i - 1 waiting pages, by their phases
    expiry: NDArray[Any] = np.zeros(1)
    for i in range(1, K + 1):
        x = p[i].reshape(W, M, -1)
        served_i = float(x.sum(axis=(0, 2)) @ b.S0)
        obsolete_i = 0.0
        if i >= 2:
            expiry = np.kron(expiry, np.ones(R)) + np.kron(np.ones(expiry.size), b.Gamma0)
            obsolete_i = float(x.sum(axis=(0, 1)) @ expiry)
        served += served_i
        obsolete += obsolete_i
        commands += abs(b.mode(i - 1) - b.mode(i)) * (served_i + obsolete_i)  # one page down
    t = tagged_totals(b, p)
    m = Measures.from_rates(offered=offered, lost=lost, obsolete=obsolete, served=served,
                            level_probabilities=level_prob, robots_at_level=b.policy.robots_at_level,
                            served_time=t.served_time_rate, obsolete_time=t.obsolete_time_rate)
    return dataclasses.replace(m, commands_per_s=commands,
                               commands_per_robot_min=commands * 60.0 / max(model.modes) if max(model.modes) else 0.0)
