"""Decisions: cost-optimal threshold policies for the model core (paper 000); the cost-minimising
renovation law and RED parameters, and the comparison of buffer policies (paper 004)."""

from ._buffers import (
    BufferChoice,
    BufferComparison,
    RenovationOptimum,
    compare_buffers,
    optimise_red,
    optimise_renovation,
    red_candidates,
)
from ._simplex import GRID_LIMIT, SimplexOptimum, simplex_pattern_search
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
    "GRID_LIMIT",
    "SEARCH_METHODS",
    "BufferChoice",
    "BufferComparison",
    "PolicySearch",
    "RenovationOptimum",
    "SimplexOptimum",
    "ThresholdOptimum",
    "compare_buffers",
    "count_policies",
    "count_threshold_vectors",
    "optimise",
    "optimise_red",
    "optimise_renovation",
    "optimise_thresholds",
    "red_candidates",
    "simplex_pattern_search",
    "static_costs",
    "threshold_vectors",
]
