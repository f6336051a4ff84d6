"""The refit's contract, as plain picklable data: what one refit is given (:class:`RefitInput`, built by
:mod:`agent.refit_window` from the agent's window) and what it returns (:class:`RefitOutcome`, with the
:class:`RefitStage` where it stopped). :func:`agent.compute.compute_refit` maps the one to the other, in a
thread or a worker process (:mod:`agent.worker`); :mod:`agent.compute` re-exports the three names."""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import BMAP, Costs, QueueModel, ThresholdPolicy
from robotctl.policies import Targets

from .policy import PolicyFit


class RefitStage(enum.Enum):
    """Where a refit stopped."""

    #: fitted and optimised; the new policy was adopted
    DONE = "done"
    #: not enough data in the window
    INPUT = "input"
    #: fitting.fit_model raised or reported failure
    FIT = "fit"
    #: policies.optimise raised or reported failure
    SOLVE = "solve"
    #: the computation took longer than refit.timeout_s
    TIMEOUT = "timeout"
    #: the fitted model's price of the policy in force disagrees with its observed cost (``misfit``): the
    #: policy in force stays (issue 27's model check)
    CHECK = "check"


@dataclass(frozen=True, eq=False)
class RefitInput:
    """Everything a refit needs, as plain data (picklable for a worker process).

    Attributes
    ----------
    delivery_times, pages, modes : ndarray
        One entry per delivery in the window: time (s), pages offered, active robots (mode) then.
    all_modes : tuple of int
        Modes the fleet can run (each gets a BMAP; unobserved ones by fitting's rule).
    search_modes : tuple of int or None
        Modes the optimiser may use (None: all).
    service_times, sizes_bytes : ndarray or None
        From completions: service seconds, or content sizes for ``processing_rate_bps``.
    capacity : int
    costs : Costs
    processing_rate_bps, mean_useful_life_s : float or None
    options : mapping
        ``fit.options``, passed through.
    window : tuple of float
        (start, end) of the window, for the report.
    mode_exposure_s : mapping of int to float
        Seconds spent in each mode over the window (exact, from the agent's mode changes).
    mode_changes : tuple of ndarray, or None
        The mode trajectory over the window, (epochs, modes): the window's start with the mode in force
        then, and each change of mode up to its end (``window[1]``); on the clock of ``delivery_times``.
        None when it is not known there (a window reaching back before a restart, client timestamps).
    rate_from_exposure : bool
        Tell fitting.fit_model how long each mode was in force: the trajectory (``mode_changes``), so
        that each mode's intervals are measured on its own clock and its rate is pages delivered in the
        mode / seconds spent in it; else ``mode_exposure_s``, which only rescales each observed mode's
        BMAP in time to that rate. False: neither (the intervals across a change of mode are dropped).
    remembered : mapping of int to BMAP
        The last observed BMAP of modes, for modes the window does not observe.
    obsolete_drops, obsolete_exposure_s : optional
        Obsolete drops and page-seconds spent waiting in the window, for the censored estimate of the
        useful life when ``mean_useful_life_s`` is not configured.
    previous_fit : mapping
        The fit summary of the policy in force (where remembered modes were last observed).
    dwell_s, hysteresis, max_commands_per_min, max_commands_per_robot_min, max_damping_cost
        ``robots.dwell_s`` (None: auto, 0 with the exact choice), ``robots.hysteresis`` (None: auto, the
        exact hysteresis policy of :func:`policies.choose_hysteresis` within the budget
        ``robots.max_commands_per_robot_min`` where it costs at most ``robots.max_damping_cost`` over the
        undamped policy; the fit summary's ``damping`` holds the choice and its
        predicted commands and cost) and ``robots.max_commands_per_min``.
    targets : Targets or None
        ``targets:`` of the configuration: the policy of least robot time that meets them
        (``policies.optimise_for_targets``) instead of the cost optimum; the costs then only price it.
    policy_kind : str
        ``policy.kind``: ``thresholds``, or ``mdp`` to adopt paper 001's MDP policy where the fitted
        model meets its assumptions (:func:`_mdp_stage`).
    policy_in_force : ThresholdPolicy or None
        The policy that was in force over the window (the model check prices it; with a joint fit a new
        optimum replaces it only when it is cheaper beyond the fit's uncertainty).
    observed_cost : tuple of float or None
        (cost, low, high): the policy in force's cost observed on the window, with its interval.
    current_policy : ThresholdPolicy or None
        robotctl's policy now (in advise mode the one it recommends, which may differ from the fleet's):
        with a joint fit a new optimum replaces it only when it is cheaper beyond the fit's uncertainty
        (``policy_in_force`` when None).
    joint_init : fitting.JointParams or None
        The previous window's joint estimate (``fit.options.arrivals: joint``): the EM starts from it.
    check_level : float
        Level of the model check's and the cost intervals (the check's false-alarm rate is 1 - level).
    check_draws : int
        Parameter draws behind the cost intervals of a joint fit.
    cold : bool
        A cold-start refit (fewer than ``refit.min_deliveries`` deliveries, before the first regular fit):
        the one-phase model of ``fitting.cold_start_model`` with exact intervals at ``cold_level``, and
        the policy optimised under the interval's pessimistic end (:func:`_cold_stage`).
    cold_level : float
        ``refit.cold_level``.
    change_level : float or None
        ``refit.change_level``: test the window for a change of the per-mode rates
        (``fitting.locate_change``) at this false-alarm level and fit only the deliveries since a change
        it finds (:func:`_change_stage`); None: the whole window.
    min_deliveries : int
        ``refit.min_deliveries``: a window cut at a change needs this many deliveries since it.
    """

    delivery_times: NDArray[np.float64]
    pages: NDArray[np.integer[Any]]
    modes: NDArray[np.integer[Any]]
    all_modes: tuple[int, ...]
    search_modes: tuple[int, ...] | None
    service_times: NDArray[np.float64] | None
    sizes_bytes: NDArray[np.float64] | None
    capacity: int
    costs: Costs
    processing_rate_bps: float | None = None
    mean_useful_life_s: float | None = None
    #: ``{"deadline": s, "phases": k}`` (config fit.useful_life): the fitted model's useful life is then this
    #: deadline, as the Erlang law of k phases (model._deadline)
    useful_life: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    window: tuple[float, float] = (0.0, 0.0)
    mode_exposure_s: Mapping[int, float] = field(default_factory=dict)
    mode_changes: tuple[NDArray[np.float64], NDArray[np.int64]] | None = None
    rate_from_exposure: bool = True
    remembered: Mapping[int, BMAP] = field(default_factory=dict)
    obsolete_drops: int | None = None
    obsolete_exposure_s: float | None = None
    previous_fit: Mapping[str, Any] = field(default_factory=dict)
    targets: Targets | None = None
    dwell_s: float | None = 0.0
    hysteresis: int | None = 0
    max_commands_per_min: int = 0
    max_commands_per_robot_min: float | None = None
    max_damping_cost: float | None = None
    policy_kind: str = "thresholds"
    policy_in_force: ThresholdPolicy | None = None
    observed_cost: tuple[float, float, float] | None = None
    current_policy: ThresholdPolicy | None = None
    joint_init: Any = None
    check_level: float = 0.95
    check_draws: int = 30
    cold: bool = False
    cold_level: float = 0.9
    change_level: float | None = None
    min_deliveries: int = 2


@dataclass(frozen=True, eq=False)
class RefitOutcome:
    """What one refit produced.

    Attributes
    ----------
    success : bool
    stage : RefitStage
        ``DONE`` on success, else where it failed.
    message : str
    result : PolicyFit or None
        On success: the policy, its predicted measures and cost, the fitted model and its summary, the
        window; what the agent adopts (:meth:`Agent.adopt <agent.core.Agent.adopt>`).
    fit_seconds, solve_seconds : float
        Wall time of the two stages.
    deliveries : int
        Deliveries in the window.
    joint_params : fitting.JointParams or None
        The window's joint estimate (``fit.options.arrivals: joint``), set whenever the joint fit ran, a
        refused (``misfit``) refit included: the refit loop passes it to the next refit's
        ``RefitInput.joint_init`` so the EM starts from it (it is picklable: it crosses to the worker).
    log_records : tuple of logging.LogRecord
        What a worker process logged while it computed (its message formatted, its traceback as text):
        :class:`agent.worker.RefitWorker` hands them to the agent's loggers, under their levels and
        handlers; empty when the refit ran in the agent's own process, which logs directly.
    """

    success: bool
    stage: RefitStage
    message: str
    result: PolicyFit | None = None
    fit_seconds: float = 0.0
    solve_seconds: float = 0.0
    deliveries: int = 0
    joint_params: Any = None
    log_records: tuple[logging.LogRecord, ...] = ()

    def __post_init__(self) -> None:
        if self.success != (self.result is not None):
            raise ValueError("RefitOutcome: a success carries its result (a PolicyFit), a failure none")

    @property
    def policy(self) -> ThresholdPolicy | None:
        return self.result.policy if self.result is not None else None

    @property
    def model(self) -> QueueModel | None:
        return self.result.model if self.result is not None else None

    @property
    def fit(self) -> Mapping[str, Any]:
        return self.result.fit if self.result is not None else {}
