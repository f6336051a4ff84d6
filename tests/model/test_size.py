"""The size of a solve before it runs (issue 11, finding 9: K = 10^4 was a MemoryError after 30 s, K = 10^9 a
traceback): the estimate against the memory a solve really holds, measured with tracemalloc."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from robotctl.model import (
    BMAP,
    PH,
    ModeArrivals,
    PreparedModel,
    QueueModel,
    ThresholdPolicy,
    model_solve_size,
    solve,
    solve_size,
)
from robotctl.model._size import _levels


def _model(K: int, R: int, batches: int) -> QueueModel:
    """Two modes (1 and 3 robots) of one two-phase BMAP with batches of 1..``batches`` pages, H2-like service,
    and R obsolescence phases (0: none)."""
    D0 = np.array([[-10.0, 2.0], [0.0, -0.5]])
    Dk = np.array([[0.05, 3.0], [0.29, 0.005]]) / batches

    def bmap(scale: float) -> BMAP:
        mats = [D0.copy()] + [Dk * scale for _ in range(batches)]
        mats[0] -= np.diag(sum(mats).sum(axis=1))
        return BMAP(tuple(mats))

    # two obsolescence phases with unequal exit rates: no exact reduction lumps them into one
    obs = {0: None, 1: PH.exponential(0.5),
           2: PH(np.array([0.3, 0.7]), np.array([[-0.9, 0.4], [0.1, -0.3]]))}[R]
    service = PH(np.array([0.4, 0.6]), np.array([[-3.0, 1.0], [2.0, -3.0]]))
    return QueueModel(K, ModeArrivals.per_mode({1: bmap(1.0), 3: bmap(3.0)}), service, obs)


@pytest.mark.parametrize(("K", "R", "batches"), [(50, 1, 2), (60, 0, 1), (30, 1, 12), (7, 2, 2), (8, 2, 3),
                                                (11, 2, 2), (13, 2, 2)])
def test_the_estimate_bounds_the_peak_a_solve_holds(K: int, R: int, batches: int) -> None:
    model = _model(K, R, batches)
    policy = ThresholdPolicy((3,) * (K // 2) + (1,) * (K + 1 - K // 2))
    gc.collect()
    tracemalloc.start()
    try:
        sol = solve(model, policy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sol.success
    size = model_solve_size(model)
    assert size.n_states == sol.n_states == PreparedModel(model).n_states  # nothing to reduce here
    assert size.method == ("iterative" if sol.method == "iterative" else "block")
    # an estimate of the peak: at least 80 % of it (it is used to refuse, so it must not be far below) and
    # at most twice it (else it refuses what would fit)
    assert 0.8 * peak <= size.bytes <= 2.0 * peak, (size.bytes, peak)


@pytest.mark.parametrize(("K", "J", "modes"), [(1, 1, 1), (2, 1, 2), (3, 2, 1), (9, 4, 3), (50, 2, 2), (40, 60, 2),
                                               (300, 17, 4)])
def test_the_shortcut_for_one_obsolescence_phase_is_the_sum_over_every_level(K: int, J: int, modes: int) -> None:
    """With R = 1 the levels 2..K-J cost alike, so solve_size sums a few levels times their counts: it must
    equal the plain sum over all K levels."""
    W, M = 2, 3
    jj = max(1, min(J, K))
    per_level, dims = _levels(W, M, 1.0, K, jj, modes, np.arange(1, K + 1, dtype=np.float64))
    full = float(per_level.sum()) + 8.0 * W * W * (jj + 2) * modes
    size = solve_size(W, M, 1, K, max_batch=J, modes=modes)
    assert size.bytes == pytest.approx(full, rel=1e-12)
    assert size.n_states == W + dims.sum() == W + K * W * M


def test_huge_capacities_are_sized_in_closed_form() -> None:
    big = solve_size(2, 10, 1, 10**9, max_batch=256, modes=4)
    assert 1e14 < big.bytes < 1e17 and big.n_states == 2 + 10**9 * 20
    assert solve_size(2, 2, 2, 10**4).bytes == float("inf")
    assert solve_size(2, 2, 2, 10**9).n_states == float("inf")


def test_the_size_is_the_reduced_models_as_solve_sees_it() -> None:
    """Paper 000's obsolescence law has equal exit rates, so solve lumps its two phases into one: K = 10^4 is
    40,002 states, not 2^9999 per level."""
    from pathlib import Path

    import yaml

    from robotctl.model import model_from_dict

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml").read_text())
    doc["model"]["capacity"] = 10_000
    model = model_from_dict(doc["model"])
    size = model_solve_size(model)
    assert size.n_states == 2 + 10_000 * 2 * 2 and size.method == "block"
    irreducible = _model(10_000, 2, 2)
    assert model_solve_size(irreducible).n_states == float("inf")
    floor = model_solve_size(irreducible, floor=True)  # what even an approximation walks: K + 1 levels
    assert floor.n_states == 2 + 10_000 * 2 * 2 and floor.bytes < 1e9
