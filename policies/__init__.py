"""Decisions: cost-optimal threshold policies for the model core (paper 000)."""

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
    "SEARCH_METHODS",
    "PolicySearch",
    "ThresholdOptimum",
    "count_policies",
    "count_threshold_vectors",
    "optimise",
    "optimise_thresholds",
    "static_costs",
    "threshold_vectors",
]
