"""Decisions: cost-optimal threshold policies for the model core (paper 000)."""

from ._search import LocalOptimum, search_policies
from ._thresholds import (
    EXHAUSTIVE_LIMIT,
    PARALLEL_POLICIES,
    SEARCH_DIM,
    SEARCH_METHODS,
    SPACES,
    PolicySearch,
    ThresholdOptimum,
    count_policies,
    count_threshold_vectors,
    optimise,
    optimise_thresholds,
    search_chain,
    static_costs,
    threshold_vectors,
)

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "PARALLEL_POLICIES",
    "SEARCH_DIM",
    "SEARCH_METHODS",
    "SPACES",
    "LocalOptimum",
    "PolicySearch",
    "ThresholdOptimum",
    "count_policies",
    "count_threshold_vectors",
    "optimise",
    "optimise_thresholds",
    "search_chain",
    "search_policies",
    "static_costs",
    "threshold_vectors",
]
