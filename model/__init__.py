"""The model core: BMAP arrivals per mode, PH service and obsolescence, queue-length and threshold
policies, the exact stationary solution of the controlled BMAP/PH/1/K queue with obsolescence (paper 000)
with exact reductions, exact references for large K and a scalable approximation with an error bar;
buffer policies (timers, renovation, RED) and paper 004's M/D/1/N queue with renovation."""

from robotctl._errors import InputError, RobotctlError

from ._approx import ApproxSolution, ApproxStatus, LadderStep, solve_approx
from ._arrivals import ModeArrivals
from ._blocks import PreparedModel
from ._bmap import BMAP
from ._bruteforce import solve_bruteforce
from ._buffer import BufferPolicy, Conflict, RedDrop, Renovation
from ._buffer_bruteforce import solve_buffer_bruteforce
from ._buffer_solve import BufferMeasures, BufferSolution, BufferStatus, PreparedBuffer, buffer_cost, solve_buffer
from ._evaluate import PolicyEvaluator, Rates
from ._fifo import solve_product_form
from ._levels import LevelChain
from ._md1n import MD1NSolution, solve_md1n
from ._measures import CostBreakdown, Measures, cost_of
from ._model import Admission, Costs, QueueModel
from ._ph import PH
from ._policy import QueueLengthPolicy, ThresholdPolicy
from ._random import fleet_model, random_bmap, random_model, random_ph, random_policy
from ._red import RedMM1Solution, solve_red_mm1
from ._reduce import Reduction, reduce_model
from ._sim_buffer import BufferSimulationResult, Deterministic, simulate_buffer
from ._sim_engine import Simulation
from ._sim_events import Controller, EventKind, StateFeedback, TraceKind, TraceRow
from ._sim_stats import (
    Comparison,
    ComparisonRow,
    Estimate,
    SimulationResult,
    SimulationStatus,
    StopRule,
    linear_ratio_estimate,
)
from ._simulate import iter_simulate, simulate, simulate_events, simulate_horizon
from ._size import SolveSize, format_bytes, model_solve_size, solve_size
from ._solve import METHODS, Solution, SolveStatus, prepare, solve
from ._spec import costs_from_dict, model_from_dict, model_to_dict, ph_from_dict

__all__ = [
    "BMAP",
    "METHODS",
    "PH",
    "Admission",
    "ApproxSolution",
    "ApproxStatus",
    "BufferMeasures",
    "BufferPolicy",
    "BufferSimulationResult",
    "BufferSolution",
    "BufferStatus",
    "Comparison",
    "ComparisonRow",
    "Conflict",
    "Controller",
    "CostBreakdown",
    "Costs",
    "Deterministic",
    "Estimate",
    "EventKind",
    "InputError",
    "LadderStep",
    "LevelChain",
    "MD1NSolution",
    "Measures",
    "ModeArrivals",
    "PolicyEvaluator",
    "PreparedBuffer",
    "PreparedModel",
    "QueueLengthPolicy",
    "QueueModel",
    "Rates",
    "RedDrop",
    "RedMM1Solution",
    "Reduction",
    "Renovation",
    "RobotctlError",
    "Simulation",
    "SimulationResult",
    "SimulationStatus",
    "Solution",
    "SolveSize",
    "SolveStatus",
    "StateFeedback",
    "StopRule",
    "ThresholdPolicy",
    "TraceKind",
    "TraceRow",
    "buffer_cost",
    "cost_of",
    "costs_from_dict",
    "fleet_model",
    "format_bytes",
    "iter_simulate",
    "linear_ratio_estimate",
    "model_from_dict",
    "model_solve_size",
    "model_to_dict",
    "ph_from_dict",
    "prepare",
    "random_bmap",
    "random_model",
    "random_ph",
    "random_policy",
    "reduce_model",
    "simulate",
    "simulate_buffer",
    "simulate_events",
    "simulate_horizon",
    "solve",
    "solve_approx",
    "solve_bruteforce",
    "solve_buffer",
    "solve_buffer_bruteforce",
    "solve_md1n",
    "solve_product_form",
    "solve_red_mm1",
    "solve_size",
]
