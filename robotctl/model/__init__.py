"""The model core: BMAP arrivals per mode, PH service and obsolescence, queue-length and threshold
policies, the exact stationary solution of the controlled BMAP/PH/1/K queue with obsolescence (paper 000)
with exact reductions, exact references for large K and a scalable approximation with an error bar;
buffer policies (timers, renovation, RED) and paper 004's M/D/1/N queue with renovation."""

import typing

from robotctl._errors import InputError, RobotctlError
from robotctl._lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from ._approx import ApproxSolution, ApproxStatus, LadderStep, evaluate_rates, rates_with_levels, solve_approx
    from ._arrivals import ModeArrivals
    from ._blocks import PreparedModel
    from ._bmap import BMAP
    from ._bruteforce import enumerate_states, explicit_generator, page_fates, phase_laws, solve_bruteforce
    from ._buffer import BufferPolicy, Conflict, RedDrop, Renovation
    from ._buffer_bruteforce import solve_buffer_bruteforce
    from ._buffer_solve import BufferMeasures, BufferSolution, BufferStatus, PreparedBuffer, buffer_cost, solve_buffer
    from ._deadline import DEADLINE_PHASES_DEFAULT, DEADLINE_PHASES_MAX, deadline_error, deadline_law
    from ._evaluate import PolicyEvaluator, Rates
    from ._fifo import solve_product_form
    from ._hysteresis import HysteresisChain, HysteresisPolicy, HysteresisSolution, per_robot_minute, solve_hysteresis
    from ._hysteresis_bruteforce import solve_hysteresis_bruteforce
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

#: Where each public name lives; a submodule is imported the first time one of its names is asked for
#: (robotctl/_lazy.py), so that importing a light name does not load the heavy parts of scipy.
_WHERE = {
    "Admission": "._model",
    "ApproxSolution": "._approx",
    "ApproxStatus": "._approx",
    "BMAP": "._bmap",
    "BufferMeasures": "._buffer_solve",
    "BufferPolicy": "._buffer",
    "BufferSimulationResult": "._sim_buffer",
    "BufferSolution": "._buffer_solve",
    "BufferStatus": "._buffer_solve",
    "Comparison": "._sim_stats",
    "ComparisonRow": "._sim_stats",
    "Conflict": "._buffer",
    "Controller": "._sim_events",
    "CostBreakdown": "._measures",
    "Costs": "._model",
    "Deterministic": "._sim_buffer",
    "Estimate": "._sim_stats",
    "EventKind": "._sim_events",
    "HysteresisChain": "._hysteresis",
    "HysteresisPolicy": "._hysteresis",
    "HysteresisSolution": "._hysteresis",
    "LadderStep": "._approx",
    "LevelChain": "._levels",
    "MD1NSolution": "._md1n",
    "METHODS": "._solve",
    "Measures": "._measures",
    "ModeArrivals": "._arrivals",
    "PH": "._ph",
    "PolicyEvaluator": "._evaluate",
    "PreparedBuffer": "._buffer_solve",
    "PreparedModel": "._blocks",
    "QueueLengthPolicy": "._policy",
    "QueueModel": "._model",
    "Rates": "._evaluate",
    "RedDrop": "._buffer",
    "RedMM1Solution": "._red",
    "Reduction": "._reduce",
    "Renovation": "._buffer",
    "Simulation": "._sim_engine",
    "SimulationResult": "._sim_stats",
    "SimulationStatus": "._sim_stats",
    "Solution": "._solve",
    "SolveSize": "._size",
    "SolveStatus": "._solve",
    "StateFeedback": "._sim_events",
    "StopRule": "._sim_stats",
    "ThresholdPolicy": "._policy",
    "TraceKind": "._sim_events",
    "TraceRow": "._sim_events",
    "buffer_cost": "._buffer_solve",
    "cost_of": "._measures",
    "DEADLINE_PHASES_DEFAULT": "._deadline",
    "DEADLINE_PHASES_MAX": "._deadline",
    "deadline_error": "._deadline",
    "deadline_law": "._deadline",
    "enumerate_states": "._bruteforce",
    "explicit_generator": "._bruteforce",
    "evaluate_rates": "._approx",
    "rates_with_levels": "._approx",
    "costs_from_dict": "._spec",
    "fleet_model": "._random",
    "format_bytes": "._size",
    "iter_simulate": "._simulate",
    "linear_ratio_estimate": "._sim_stats",
    "model_from_dict": "._spec",
    "model_solve_size": "._size",
    "model_to_dict": "._spec",
    "page_fates": "._bruteforce",
    "ph_from_dict": "._spec",
    "per_robot_minute": "._hysteresis",
    "phase_laws": "._bruteforce",
    "prepare": "._solve",
    "random_bmap": "._random",
    "random_model": "._random",
    "random_ph": "._random",
    "random_policy": "._random",
    "reduce_model": "._reduce",
    "simulate": "._simulate",
    "simulate_buffer": "._sim_buffer",
    "simulate_events": "._simulate",
    "simulate_horizon": "._simulate",
    "solve": "._solve",
    "solve_approx": "._approx",
    "solve_bruteforce": "._bruteforce",
    "solve_buffer": "._buffer_solve",
    "solve_buffer_bruteforce": "._buffer_bruteforce",
    "solve_md1n": "._md1n",
    "solve_hysteresis": "._hysteresis",
    "solve_hysteresis_bruteforce": "._hysteresis_bruteforce",
    "solve_product_form": "._fifo",
    "solve_red_mm1": "._red",
    "solve_size": "._size",
}
__getattr__, __dir__ = _lazy_exports(__name__, _WHERE)

__all__ = [
    "BMAP",
    "DEADLINE_PHASES_DEFAULT",
    "DEADLINE_PHASES_MAX",
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
    "HysteresisChain",
    "HysteresisPolicy",
    "HysteresisSolution",
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
    "deadline_error",
    "deadline_law",
    "enumerate_states",
    "evaluate_rates",
    "explicit_generator",
    "fleet_model",
    "format_bytes",
    "iter_simulate",
    "linear_ratio_estimate",
    "model_from_dict",
    "model_solve_size",
    "model_to_dict",
    "page_fates",
    "per_robot_minute",
    "ph_from_dict",
    "phase_laws",
    "prepare",
    "random_bmap",
    "random_model",
    "random_ph",
    "random_policy",
    "rates_with_levels",
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
    "solve_hysteresis",
    "solve_hysteresis_bruteforce",
    "solve_md1n",
    "solve_product_form",
    "solve_red_mm1",
    "solve_size",
]
