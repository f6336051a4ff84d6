"""RED on M/M/1 with N places (paper 004, Section 2.3): the consecutive-loss law sums to one with the
corrected base case and not with the printed one, agrees with the matrix route and with simulation,
and the stationary law agrees with the CTMC core."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl.model import (
    BMAP,
    PH,
    BufferPolicy,
    InputError,
    ModeArrivals,
    QueueModel,
    RedDrop,
    ThresholdPolicy,
    simulate_buffer,
    solve_buffer,
    solve_red_mm1,
)
from robotctl.model._red import consecutive_losses_matrix

CASES = [(1.3, 1.0, RedDrop.linear(1, 4, 0.3, 5)), (0.8, 1.0, RedDrop.linear(2, 7, 0.5, 7)),
         (2.0, 1.0, RedDrop((0.1, 0.2, 0.4, 0.6))), (1.0, 1.5, RedDrop.linear(0, 3, 0.2, 4))]


@pytest.mark.parametrize(("lam", "mu", "drop"), CASES)
def test_consecutive_losses_sum_to_one_and_match_the_matrix_route(lam: float, mu: float, drop: RedDrop) -> None:
    s = solve_red_mm1(lam, mu, drop, max_run=400)
    assert s.success
    assert sum(s.consecutive_losses) == pytest.approx(1.0, abs=1e-12)
    matrix = consecutive_losses_matrix(lam, mu, drop, np.array(s.distribution), 400)
    np.testing.assert_allclose(s.consecutive_losses, matrix, rtol=1e-10, atol=1e-15)
    k = np.arange(1, 401)
    assert s.mean_consecutive_losses == pytest.approx(float(k @ matrix), rel=1e-10)
    assert s.second_moment_consecutive_losses == pytest.approx(float((k * k) @ matrix), rel=1e-10)


def printed_recursion(lam: float, mu: float, drop: RedDrop, P: np.ndarray, max_run: int) -> np.ndarray:
    """Section 2.3 as printed: the sum that is P(next arrival accepted) taken as l_{1,i}."""
    delta = lam / (lam + mu)
    d = np.append(drop.probabilities, 1.0)
    top = d.size
    cur = np.array([sum(delta * (1 - d[k]) * (1 - delta) ** (i - k) for k in range(1, i + 1))
                    + (1 - delta) ** i * (1 - d[0]) for i in range(top)])
    w = P[:top - 1] * (1 - d[:top - 1])
    den = sum(w[n] * sum(delta * d[i] * (1 - delta) ** (n + 1 - i) for i in range(1, n + 2)) for n in range(top - 1))
    out = [float(w @ cur[1:]) / den]
    for _ in range(max_run - 1):
        nxt = np.zeros(top)
        nxt[1] = delta * d[1] * cur[1]
        for i in range(2, top):
            nxt[i] = delta * d[i] * cur[i] + (1 - delta) * nxt[i - 1]
        cur = nxt
        out.append(float(w @ cur[1:]) / den)
    return np.array(out)


@pytest.mark.parametrize(("lam", "mu", "drop"), CASES)
def test_printed_base_case_does_not_give_a_distribution(lam: float, mu: float, drop: RedDrop) -> None:
    s = solve_red_mm1(lam, mu, drop)
    printed = printed_recursion(lam, mu, drop, np.array(s.distribution), 400)
    assert abs(printed.sum() - 1.0) > 1e-2
    if drop.probabilities[0] == 0.0:
        # an off-by-one: the printed k-th value is the corrected law at k - 1
        np.testing.assert_allclose(printed[1:30], s.consecutive_losses[:29], rtol=1e-12)


@pytest.mark.parametrize(("lam", "mu", "drop"), CASES)
def test_stationary_law_equals_the_ctmc_core(lam: float, mu: float, drop: RedDrop) -> None:
    s = solve_red_mm1(lam, mu, drop)
    K = len(drop.probabilities)
    model = QueueModel(K, ModeArrivals.per_mode({1: BMAP((np.array([[-lam]]), np.array([[lam]])))}),
                       PH.exponential(mu))
    m = solve_buffer(model, ThresholdPolicy.static(1, K), BufferPolicy(red=drop)).measures
    np.testing.assert_allclose(s.distribution, m.queue_length_distribution, atol=1e-14)
    assert s.red_probability == pytest.approx(m.p_red, abs=1e-14)
    assert s.blocking_probability == pytest.approx(m.p_blocked, abs=1e-14)
    assert s.loss_probability == pytest.approx(m.p_loss, abs=1e-14)


@pytest.mark.parametrize(("lam", "mu", "drop", "seed"), [(*CASES[0], 41), (*CASES[2], 42)])
def test_consecutive_losses_inside_simulated_intervals(lam: float, mu: float, drop: RedDrop, seed: int) -> None:
    s = solve_red_mm1(lam, mu, drop)
    K = len(drop.probabilities)
    model = QueueModel(K, ModeArrivals.per_mode({1: BMAP((np.array([[-lam]]), np.array([[lam]])))}),
                       PH.exponential(mu))
    sim = simulate_buffer(model, ThresholdPolicy.static(1, K), BufferPolicy(red=drop), np.random.default_rng(seed),
                          events=300_000, max_run=6)
    exact = {f"L_{k}": s.consecutive_losses[k - 1] for k in range(1, 7)}
    exact |= {"p_red": s.red_probability, "p_blocked": s.blocking_probability}
    comparison = sim.check(exact, familywise=True)
    assert comparison.all_inside, str(comparison)


def test_undefined_without_acceptances_and_input_errors() -> None:
    s = solve_red_mm1(1.0, 1.0, RedDrop((1.0, 1.0)))
    assert not s.success and "undefined" in s.message and s.loss_probability == pytest.approx(1.0)
    with pytest.raises(InputError, match=r"^service_rate"):
        solve_red_mm1(1.0, 0.0, RedDrop((0.0,)))
    with pytest.raises(InputError, match=r"^red\[1\]"):
        RedDrop((0.0, 1.5))
