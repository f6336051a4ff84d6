"""Decisions: cost-optimal threshold policies for the model core (paper 000), and the policy of least
robot time that meets service targets."""

from ._targets import (
    MEASURE_OF,
    TARGET_METHODS,
    BestPossible,
    Targets,
    TargetSearch,
    TargetStatus,
    every_policy,
    optimise_for_targets,
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
    "MEASURE_OF",
    "SEARCH_METHODS",
    "TARGET_METHODS",
    "BestPossible",
    "PolicySearch",
    "TargetSearch",
    "TargetStatus",
    "Targets",
    "ThresholdOptimum",
    "count_policies",
    "count_threshold_vectors",
    "every_policy",
    "optimise",
    "optimise_for_targets",
    "optimise_thresholds",
    "static_costs",
    "threshold_vectors",
]
