"""Fitting: from delivery timestamps, sizes and service samples to the model core's BMAP per mode,
PH service law and obsolescence law (issue 3).

The public names are re-exported from private modules: :func:`fit_model` runs the whole pipeline;
:func:`map2_from_statistics` and :func:`h2_from_moments` fit from summary statistics alone;
:class:`ModeTrajectory` lets it measure each mode's intervals on the mode's own clock;
:func:`fit_joint` fits all modes at once on one hidden phase process by maximum likelihood (issue 27),
:func:`price_interval` prices a policy with the fit's parameter uncertainty and :func:`model_check` compares
that with the observed cost;
:func:`adjust_arrivals` completes a fit with the remembered arrivals of modes its window missed;
:func:`locate_change` tests a window for one change of the per-mode rates and locates it;
:func:`cold_start_model` builds a one-phase model with exact intervals from the first deliveries; the
pipeline steps are pure functions with frozen results.
"""

from ._arrivals import ArrivalAdjustment, adjust_arrivals
from ._change import ChangePoint, locate_change
from ._coldstart import (
    ColdStartFit,
    RateInterval,
    cold_start_model,
    exponential_rate_interval,
    poisson_rate_interval,
)
from ._deliveries import (
    Batches,
    Deliveries,
    GapMixture,
    IntervalSplit,
    ModeSample,
    Threshold,
    choose_batch_resolution,
    choose_censor_bound,
    extract_batches,
    fit_gap_mixture,
    split_intervals,
    validate_deliveries,
)
from ._fit import fit_model
from ._fit_types import FitOptions, FitReport, FitStatus, ModeFit, ModelFit
from ._joint import (
    JointData,
    JointFit,
    JointParams,
    fit_joint,
    joint_covariance,
    joint_data,
    joint_free_vector,
    joint_from_free_vector,
    joint_loglikelihood,
    joint_score,
)
from ._map2 import Map2Fit, MapFitStatus, gamma_reach, map2_from_statistics
from ._modeclock import ModeClock, ModeTrajectory, clock_intervals, mode_clock, reconcile_modes, split_on_clock
from ._modelcheck import ModelCheck, PolicyComparison, PricedCost, compare_policies, model_check, price_interval
from ._obsolescence import ObsolescenceFit, fit_obsolescence, waiting_exposure
from ._ph2 import Cf1, PhFit, PhFitStatus, cf1_from_moments, h2_from_moments
from ._service import ServiceFit, fit_service
from ._stats import SampleStats, fit_decay, sample_stats

__all__ = [
    "ArrivalAdjustment",
    "Batches",
    "Cf1",
    "ChangePoint",
    "ColdStartFit",
    "Deliveries",
    "FitOptions",
    "FitReport",
    "FitStatus",
    "GapMixture",
    "IntervalSplit",
    "JointData",
    "JointFit",
    "JointParams",
    "Map2Fit",
    "MapFitStatus",
    "ModeClock",
    "ModeFit",
    "ModeSample",
    "ModeTrajectory",
    "ModelCheck",
    "ModelFit",
    "ObsolescenceFit",
    "PhFit",
    "PhFitStatus",
    "PolicyComparison",
    "PricedCost",
    "RateInterval",
    "SampleStats",
    "ServiceFit",
    "Threshold",
    "adjust_arrivals",
    "cf1_from_moments",
    "choose_batch_resolution",
    "choose_censor_bound",
    "clock_intervals",
    "cold_start_model",
    "compare_policies",
    "exponential_rate_interval",
    "extract_batches",
    "fit_decay",
    "fit_gap_mixture",
    "fit_joint",
    "fit_model",
    "fit_obsolescence",
    "fit_service",
    "gamma_reach",
    "h2_from_moments",
    "joint_covariance",
    "joint_data",
    "joint_free_vector",
    "joint_from_free_vector",
    "joint_loglikelihood",
    "joint_score",
    "locate_change",
    "map2_from_statistics",
    "mode_clock",
    "model_check",
    "poisson_rate_interval",
    "price_interval",
    "reconcile_modes",
    "sample_stats",
    "split_intervals",
    "split_on_clock",
    "validate_deliveries",
    "waiting_exposure",
]
