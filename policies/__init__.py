"""Decisions: cost-optimal threshold policies for the model core (paper 000), optimal dynamic control
by MDP and the static-fleet baseline (paper 001), and a lower bound on every policy's cost from a
full-information MDP."""

from ._certificate import FORMULATIONS, BoundStatus, FullStateMdp, LowerBound, build_mdp, mdp_lower_bound
from ._mdp import (
    DynamicController,
    DynamicOptimum,
    DynamicPolicy,
    MdpStatus,
    RobotsProblem,
    StaticFleet,
    solve_dynamic,
    static_cost,
    static_fleet,
    unrestricted_dynamic,
)
from ._thresholds import (
    EXHAUSTIVE_LIMIT,
    SEARCH_METHODS,
    PolicySearch,
    ThresholdOptimum,
    count_policies,
    count_threshold_vectors,
    optimise,
    optimise_thresholds,
    static_costs,
    threshold_vectors,
)

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "FORMULATIONS",
    "SEARCH_METHODS",
    "BoundStatus",
    "DynamicController",
    "DynamicOptimum",
    "DynamicPolicy",
    "FullStateMdp",
    "LowerBound",
    "MdpStatus",
    "PolicySearch",
    "RobotsProblem",
    "StaticFleet",
    "ThresholdOptimum",
    "build_mdp",
    "count_policies",
    "count_threshold_vectors",
    "mdp_lower_bound",
    "optimise",
    "optimise_thresholds",
    "solve_dynamic",
    "static_cost",
    "static_costs",
    "static_fleet",
    "threshold_vectors",
    "unrestricted_dynamic",
]
