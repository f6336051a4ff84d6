"""Joint maximum-likelihood fit of the mode-modulated BMAP (issue 27, step 1).

Paper 000's arrivals: with l robots active the arrivals are the BMAP D^(l) = (D_0^(l), D_1^(l), ...), all
on ONE phase space; the phase carries over when the number of active robots changes. The per-mode fit
(:func:`fit_model`) measures each mode on its own clock and so loses the shared phase: under threshold
control the mode follows the queue and the queue follows the phase, and the rate seen while a mode is on
is the rate *given that the mode is on*, not the mode's rate.

This module fits all modes at once. The mode trajectory (the epochs at which the number of active robots
changed) is a known covariate; the phase is hidden. The structures offered are the paper's parsimonious
ones, on m = 1..4 common phases:

``shared``
    a phase generator Q shared by all modes, mode- and phase-dependent batch rates lambda^(l)_i and a
    batch-size law per mode: D_0^(l) = Q - diag(lambda^(l)), D_k^(l) = diag(lambda^(l)) p_k^(l)
    (a Markov-modulated batch Poisson process whose rates the mode scales freely).
``linear``
    the same with the linear rule lambda^(l) = l lambda and one batch-size law: D^(l) = paper 000's
    real-data model D_k^(l) = l diag(lambda) p_k, D_0^(l) = Q - l diag(lambda).

``general``
    paper 000's model itself: a BMAP per mode on the common phases, whose batches may move the phase and
    whose phase moves without arrivals depend on the mode: D_k^(l) (k = 1..K) free non-negative m x m
    matrices, H^(l) free non-negative off-diagonal rates, D_0^(l) = H^(l) - diag(H^(l) 1 + sum_k D_k^(l) 1).
    Free parameters L m (m - 1) + (sizes seen per mode, summed) m^2 + (m - 1). The moves without arrivals
    are per mode rather than shared because the paper's modes have their own D_0^(l) (its Section 7
    example) and because the M-step is then one MAP EM M-step per mode; the mode is known, so the extra
    m (m - 1) (L - 1) parameters cost BIC little against the batches that inform them. The ``auto``
    search offers it with at most ``GENERAL_MAX_PHASES`` = 3 phases.

With ``batch_law="phase"`` the batch-size law also depends on the phase (p_{i,k}^(l)); ``general`` has its
laws in its matrices and ignores ``batch_law``.

**Likelihood.** The observation is cut at every batch and every mode change into pieces; a piece of
length tau in mode l that ends with a batch of k pages contributes the matrix expm(D_0^(l) tau) D_k^(l), one
that ends with a mode change (or the end of the observation) expm(D_0^(l) tau). A stop longer than the
censoring bound ends a segment: the next one starts afresh at its first batch from the initial law
pi_0 (a piece ``1 pi_0`` in the product, so one product covers every segment). The likelihood is
pi_0 M_1 M_2 ... M_n 1.

**EM** (Rydén 1996 for MMPPs; Breuer 2002 and Klemm, Lindemann & Lohmann 2003 for BMAPs): the forward
vectors alpha_j = pi_0 M_1 ... M_j and backward vectors beta_j = M_{j+1} ... M_n 1 are computed by a
parallel prefix product (pairs of pieces multiplied in one numpy call per level, log2 n levels, each
product rescaled), so that a million pieces take a handful of vectorised passes rather than a Python
loop. Inside a piece the expected time in phase i and the expected number of Q-jumps i -> j come from

    Z = int_0^tau (alpha expm(D_0 u))^T (expm(D_0 (tau - u)) b) du,   b = D_k beta_{j+1}

evaluated in the eigenbasis of D_0^(l) = V diag(w) V^-1 (Van Loan's integral in closed form,
int e^{a u} e^{c (tau - u)} du = (e^{a tau} - e^{c tau}) / (a - c)), summed over the pieces of a mode and
transformed back once. The M-step is in closed form: Q_ij = N_ij / T_i, lambda^(l)_i = A^(l)_i / T^(l)_i,
p_k^(l) = A_k^(l) / A^(l). Under ``general`` the batch that ends a piece in mode l contributes
expm(D_0^(l) tau) D_k^(l), so b = D_k^(l) beta_{j+1}; the expected moves without arrival are
N^(l)_ij = Z^(l)_ij H^(l)_ij (Z summed over mode l's pieces), the expected batches of size k that move
i -> j are A^(l)_kij = sum_n (alpha_n expm(D_0^(l) tau_n))_i D_k^(l)_ij (beta_{n+1})_j / (alpha_n M_n beta_{n+1})
over the pieces n that end with them, and the M-step is H^(l)_ij = N^(l)_ij / T^(l)_i,
D_k^(l)_ij = A^(l)_kij / T^(l)_i (the MAP EM's closed form, per mode). The gradient of the log-likelihood
follows from the same statistics (Fisher's identity), and the observed information by differencing it
(:attr:`JointFit.covariance`).

The parts live in private modules, re-exported here: the data and parameters in ``_joint_model``, the
likelihood and E-step in ``_joint_likelihood``, the M-step and EM iterations in ``_joint_em``, the score and
observed information in ``_joint_information``; this module holds the fit itself (warm starts, and the
choice of phases and structure by BIC).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import InputError, ModeArrivals

from ._joint_em import WARM_MIN_GAIN, WARM_TOL, _em, _m_step, _prefit
from ._joint_information import joint_covariance, joint_free_vector, joint_from_free_vector, joint_score
from ._joint_likelihood import _e_step, joint_loglikelihood
from ._joint_model import (
    _RATE_FLOOR,
    BATCH_LAWS,
    GENERAL_MAX_PHASES,
    MAX_PHASES,
    STRUCTURES,
    JointData,
    JointParams,
    _check_structure,
    general_params,
    initial_params,
    joint_data,
)


# --------------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JointFit:
    """A joint maximum-likelihood fit (see :func:`fit_joint`).

    Attributes
    ----------
    params : JointParams
        The estimate, phases ordered by mean rate.
    loglik : float
        Log-likelihood at the estimate (the density of the batch epochs and sizes given the trajectory).
    bic : float
        -2 loglik + (free parameters) log(batches).
    n_parameters : int
    iterations : int
        EM iterations run.
    converged : bool
        The last iteration raised the log-likelihood by less than ``tol`` per batch.
    success : bool
        Converged (or stopped at ``max_iter`` with a finite likelihood that EM did not lower).
    message : str
    candidates : tuple of (phases, structure, loglik, bic)
        Every model compared (one when the phases and structure were given).
    n_batches : int
    data : JointData
    """

    params: JointParams
    loglik: float
    bic: float
    n_parameters: int
    iterations: int
    converged: bool
    success: bool
    message: str
    candidates: tuple[tuple[int, str, float, float], ...]
    n_batches: int
    data: JointData

    def model_arrivals(self, all_modes: Sequence[int] | None = None) -> ModeArrivals:
        """The fitted arrivals as the model core takes them (modes outside the data need ``linear``)."""
        return self.params.arrivals(all_modes)

    def warm_start(self, data: JointData, **kw: Any) -> JointFit:
        """Refit on new data starting from this estimate (same phases, structure and batch law)."""
        return fit_joint(data, phases=self.params.phases, structure=self.params.structure,
                         batch_law=self.params.batch_law, init=self.params, **kw)

    def gradient(self) -> NDArray[np.float64]:
        """The score at the estimate in :func:`joint_free_vector`'s coordinates (about 0 at a maximum)."""
        return joint_score(self.params, self.data)

    def covariance(self, *, step: float = 1e-4) -> NDArray[np.float64]:
        """Inverse observed information in :func:`joint_free_vector`'s coordinates (logs of the jump rates
        and batch rates), from central differences of the Fisher-identity score; the batch-size laws are
        held at their estimate."""
        return joint_covariance(self.params, self.data, step=step)


def fit_joint(data: JointData, *, phases: int | Sequence[int] = (1, 2, 3), structure: str | Sequence[str] = "shared",
              batch_law: str = "mode", init: JointParams | None = None, max_iter: int = 500, tol: float = 1e-6,
              warm_tol: float | None = WARM_TOL) -> JointFit:
    """Fit the mode-modulated BMAP by maximum likelihood (EM); choose phases and structure by BIC.

    Parameters
    ----------
    data : JointData
        From :func:`joint_data`.
    phases : int or sequence of int
        Common phases m (1..4); several: the lowest BIC wins.
    structure : str or sequence of str
        ``shared``, ``linear`` and/or ``general`` (see the module docstring); when several are given,
        ``general`` is tried with at most ``GENERAL_MAX_PHASES`` phases.
    batch_law : str
        ``mode`` or ``phase``.
    init : JointParams, optional
        Warm start (its phases and structure are used; ``phases`` and ``structure`` are ignored).
    max_iter : int
    tol : float
        Stop when an iteration raises the log-likelihood by less than ``tol`` per batch.
    warm_tol : float or None
        With ``init``: stop after the first EM step when it raised the log-likelihood by less than this
        per batch or by less than ``WARM_MIN_GAIN`` (1.92, no significant improvement): the previous
        window's estimate is already as good as the data can tell. None runs EM to ``tol`` from the warm
        start too.
    """
    if not isinstance(data, JointData):
        raise InputError("data", f"must be a JointData, got {type(data).__name__}", "build it with joint_data")
    if data.n_batches < 1:
        raise InputError("data", "has no batch after the first of each segment", "give at least two batches")
    if init is not None:
        if init.modes != data.modes:
            init = _align_modes(init, data)
        K = data.max_batch
        if init.arrival is not None and init.hidden is not None and init.arrival.shape[1] != K:
            D = init.arrival[:, :K]
            if D.shape[1] < K:
                D = np.concatenate([D, np.zeros((D.shape[0], K - D.shape[1], *D.shape[2:]))], axis=1)
            init = general_params(init.modes, init.hidden, D, init.initial)
        elif init.batch_probs.shape[2] < K:
            pad = np.zeros((*init.batch_probs.shape[:2], K - init.batch_probs.shape[2]))
            init = replace(init, batch_probs=np.concatenate([init.batch_probs, pad], axis=2))
        elif init.batch_probs.shape[2] > K:
            bp = init.batch_probs[:, :, :K]
            init = replace(init, batch_probs=bp / bp.sum(axis=2, keepdims=True))
        starts = [init]
    else:
        ph = (phases,) if isinstance(phases, int) else tuple(phases)
        st = (structure,) if isinstance(structure, str) else tuple(structure)
        if not ph or not st:
            raise InputError("phases", "no candidate model", "give at least one phase count and structure")
        starts = []
        for s in st:
            for p in ph:
                _check_structure(s, batch_law, p)
                if s == "general" and p > GENERAL_MAX_PHASES and len(st) > 1:
                    continue                 # a search over structures: general only up to 3 phases
                if s != "general":
                    starts.append(initial_params(data, p, structure=s, batch_law=batch_law))
    results = [_em(_prefit(p0, data, tol) if init is None else p0, data, max_iter=max_iter, tol=tol,
                   warm_tol=warm_tol if init is not None else None)
               for p0 in starts]
    if init is None and "general" in st:
        # general starts from the moment-based start (the shared one with every batch given a chance
        # to move the phase): on paper 000's example (its batches move the phase) EM from there reached
        # the maximum in about 50 iterations, while from the converged shared fit it lingered near a
        # saddle for hundreds
        for p in ph:
            if p > GENERAL_MAX_PHASES and len(st) > 1:
                continue
            p0 = _prefit(initial_params(data, p, structure="general"), data, tol)
            results.append(_em(p0, data, max_iter=max_iter, tol=tol))
    logn = math.log(max(data.n_batches, 2))
    cands = []
    best: JointFit | None = None
    for params, ll, it, conv in results:
        k = params.n_parameters(data)
        bic = -2.0 * ll + k * logn
        cands.append((params.phases, params.structure, ll, bic))
        ok = math.isfinite(ll)
        msg = (f"{params.structure}, {params.phases} phase(s): loglik {ll:.6g} after {it} EM iteration(s)"
               + ("" if conv else f" (not converged within {max_iter})"))
        fit = JointFit(params.canonical(), ll, bic, k, it, conv, ok, msg, (), data.n_batches, data)
        if best is None or (math.isfinite(bic) and (not math.isfinite(best.bic) or bic < best.bic)):
            best = fit
    assert best is not None
    return replace(best, candidates=tuple(cands),
                   message=best.message + (f"; chosen by BIC among {len(cands)}" if len(cands) > 1 else ""))


def _align_modes(init: JointParams, data: JointData) -> JointParams:
    """A warm start whose modes differ from the data's: modes it lacks take the nearest mode's rates
    (scaled by the mode ratio) and batch law."""
    known = list(init.modes)
    if init.hidden is not None and init.arrival is not None:
        H, D = [], []
        for mode in data.modes:
            j = known.index(mode) if mode in known else int(np.argmin([abs(mode - k) for k in known]))
            ratio = 1.0 if mode in known or known[j] <= 0 else mode / known[j]
            H.append(init.hidden[j])
            D.append(init.arrival[j] * ratio)
        return general_params(data.modes, np.asarray(H), np.asarray(D), init.initial)
    rates, probs = [], []
    for mode in data.modes:
        if mode in known:
            j = known.index(mode)
            rates.append(init.rates[j])
        else:
            j = int(np.argmin([abs(mode - k) for k in known]))
            ratio = mode / known[j] if known[j] > 0 else 1.0
            rates.append(init.rates[j] * ratio)
        probs.append(init.batch_probs[j])
    return replace(init, modes=data.modes, rates=np.maximum(np.asarray(rates), _RATE_FLOOR),
                   batch_probs=np.asarray(probs))


__all__ = [
    "BATCH_LAWS",
    "GENERAL_MAX_PHASES",
    "MAX_PHASES",
    "STRUCTURES",
    "WARM_MIN_GAIN",
    "WARM_TOL",
    "JointData",
    "JointFit",
    "JointParams",
    "_e_step",
    "_m_step",
    "fit_joint",
    "initial_params",
    "joint_covariance",
    "joint_data",
    "joint_free_vector",
    "joint_from_free_vector",
    "joint_loglikelihood",
    "joint_score",
]
