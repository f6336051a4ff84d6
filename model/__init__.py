"""The model core: BMAP arrivals per mode, PH service and obsolescence, threshold policies, and the exact
stationary solution of the controlled BMAP/PH/1/K queue with obsolescence (paper 000)."""

from robotctl._errors import InputError, RobotctlError

from ._approx import ApproxSolution, ApproxStatus, LadderStep, solve_approx
from ._arrivals import ModeArrivals
from ._blocks import PreparedModel
from ._bmap import BMAP
from ._bruteforce import solve_bruteforce
from ._evaluate import PolicyEvaluator, Rates
from ._fifo import solve_product_form
from ._levels import LevelChain
from ._measures import CostBreakdown, Measures, cost_of
from ._model import Admission, Costs, QueueModel
from ._ph import PH
from ._policy import QueueLengthPolicy, ThresholdPolicy
from ._random import fleet_model, random_bmap, random_model, random_ph, random_policy
from ._reduce import Reduction, reduce_model
from ._sim_engine import Simulation
from ._sim_events import Controller, EventKind, TraceKind, TraceRow
from ._sim_stats import Comparison, ComparisonRow, Estimate, SimulationResult, SimulationStatus, StopRule
from ._simulate import iter_simulate, simulate, simulate_events, simulate_horizon
from ._solve import METHODS, Solution, SolveStatus, prepare, solve
from ._spec import costs_from_dict, model_from_dict, model_to_dict, ph_from_dict

__all__ = [
    "BMAP",
    "METHODS",
    "PH",
    "Admission",
    "ApproxSolution",
    "ApproxStatus",
    "Comparison",
    "ComparisonRow",
    "Controller",
    "CostBreakdown",
    "Costs",
    "Estimate",
    "EventKind",
    "InputError",
    "LadderStep",
    "LevelChain",
    "Measures",
    "ModeArrivals",
    "PolicyEvaluator",
    "PreparedModel",
    "QueueLengthPolicy",
    "QueueModel",
    "Rates",
    "Reduction",
    "RobotctlError",
    "Simulation",
    "SimulationResult",
    "SimulationStatus",
    "Solution",
    "SolveStatus",
    "StopRule",
    "ThresholdPolicy",
    "TraceKind",
    "TraceRow",
    "cost_of",
    "costs_from_dict",
    "fleet_model",
    "iter_simulate",
    "model_from_dict",
    "model_to_dict",
    "ph_from_dict",
    "prepare",
    "random_bmap",
    "random_model",
    "random_ph",
    "random_policy",
    "reduce_model",
    "simulate",
    "simulate_events",
    "simulate_horizon",
    "solve",
    "solve_approx",
    "solve_bruteforce",
    "solve_product_form",
]
