"""The exact core under buffer policies (timers, renovation, RED) against three independent routes:
paper 000's solver (timers only), the explicit brute force (every combination) and the simulator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.agent import load_model_file
from robotctl.model import (
    Admission,
    BufferMeasures,
    BufferPolicy,
    Conflict,
    Costs,
    InputError,
    PreparedBuffer,
    QueueModel,
    RedDrop,
    Renovation,
    ThresholdPolicy,
    buffer_cost,
    cost_of,
    random_model,
    random_policy,
    simulate_buffer,
    solve,
    solve_buffer,
    solve_buffer_bruteforce,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
OPTIMUM = ThresholdPolicy.parse("3,3,3,1,1,1")
SCALARS = ("arrival_rate", "p_blocked", "p_red", "p_renovated", "p_expired", "p_served", "p_served_stale",
           "p_renovated_stale", "p_starvation", "mean_active_robots", "mean_queue_length",
           "second_moment_queue_length", "mean_response_served", "mean_sojourn_expired")


@pytest.fixture(scope="module")
def example() -> tuple[QueueModel, Costs]:
    return load_model_file(str(EXAMPLE))


def assert_same(a: BufferMeasures, b: BufferMeasures, rtol: float = 1e-9) -> None:
    for name in SCALARS:
        x, y = getattr(a, name), getattr(b, name)
        assert math.isclose(x, y, rel_tol=rtol, abs_tol=1e-12), f"{name}: {x!r} != {y!r}"
    np.testing.assert_allclose(a.queue_length_distribution, b.queue_length_distribution, rtol=rtol, atol=1e-12)


def test_timers_only_is_paper_000(example: tuple[QueueModel, Costs]) -> None:
    """With timers and nothing else the core is paper 000's model: every measure and the cost J = 63.54
    as the block solver gives them."""
    model, costs = example
    exact = solve(model, OPTIMUM).measures
    ours = solve_buffer(model, OPTIMUM, BufferPolicy())
    assert ours.success and ours.method == "dense-lu" and ours.residual < 1e-12
    m = ours.measures
    pairs = [(m.p_blocked, exact.p_loss), (m.p_expired, exact.p_obsolete), (m.p_served, exact.p_success),
             (m.p_starvation, exact.p_starvation), (m.mean_active_robots, exact.mean_active_robots),
             (m.mean_queue_length, exact.mean_queue_length), (m.mean_response_served, exact.mean_response_served),
             (m.mean_sojourn_expired, exact.mean_sojourn_obsolete), (m.arrival_rate, exact.arrival_rate),
             (buffer_cost(m, costs).total, cost_of(exact, costs).total)]
    for x, y in pairs:
        assert x == pytest.approx(y, rel=1e-10)
    assert m.p_renovated == m.p_red == m.p_served_stale == m.p_renovated_stale == 0.0
    assert (m.p_loss, m.to_dict()["p_obsolete"], m.p_success) == pytest.approx(
        (exact.p_loss, exact.p_obsolete, exact.p_success), rel=1e-10)
    assert round(buffer_cost(m, costs).total, 2) == 63.54


def test_every_page_has_one_fate(example: tuple[QueueModel, Costs]) -> None:
    model, _ = example
    buffer = BufferPolicy(timers=False, renovation=Renovation((0.4, 0.3, 0.2, 0.1), Conflict.SKIP),
                          red=RedDrop.linear(1, 4, 0.3, 5))
    m = solve_buffer(model, OPTIMUM, buffer).measures
    total = m.p_blocked + m.p_red + m.p_renovated + m.p_expired + m.p_served
    assert total == pytest.approx(1.0, abs=1e-12)
    assert m.p_loss + m.p_stale + (m.p_served - m.p_served_stale) == pytest.approx(1.0, abs=1e-12)
    assert 0 < m.p_renovated_stale < m.p_renovated and 0 < m.p_served_stale < m.p_served


buffers = st.fixed_dictionaries({
    "timers": st.booleans(),
    "renovation": st.one_of(st.none(), st.tuples(st.integers(1, 4), st.sampled_from(list(Conflict)))),
    "red": st.booleans(),
})
models = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "capacity": st.integers(1, 4),
    "arrival_order": st.integers(1, 2),
    "service_order": st.integers(1, 2),
    "obsolescence_order": st.sampled_from([None, 1, 2]),
    "max_batch": st.integers(1, 3),
    "modes": st.sampled_from([(1,), (1, 2), (1, 3)]),
    "load": st.floats(0.3, 2.0),
    "admission": st.sampled_from(list(Admission)),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models, buffers)
def test_core_agrees_with_bruteforce(params: dict, spec: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    K = model.capacity
    policy = random_policy(rng, model.modes, K)
    renovation = None
    if spec["renovation"] is not None:
        length, conflict = spec["renovation"]
        renovation = Renovation(tuple(rng.dirichlet(np.ones(min(length, K)))), conflict)
    red = RedDrop(tuple(rng.uniform(0.0, 0.6, K))) if spec["red"] else None
    buffer = BufferPolicy(spec["timers"], renovation, red)
    exact = solve_buffer(model, policy, buffer)
    brute = solve_buffer_bruteforce(model, policy, buffer)
    assert exact.success, exact.message
    assert_same(exact.measures, brute.measures)
    for x, y in zip(exact.level_vectors, brute.level_vectors):
        np.testing.assert_allclose(x, y, rtol=1e-8, atol=1e-13)


def test_tagged_chain_rows_balance(example: tuple[QueueModel, Costs]) -> None:
    """Every row of the tagged chain's generator plus its absorption rates (served, expired, removed)
    sums to zero: every way a tagged page can leave is accounted for."""
    model, _ = example
    for buffer in (BufferPolicy(renovation=Renovation((0.5, 0.2, 0.3), Conflict.KEEP_ONE)),
                   BufferPolicy(timers=False, renovation=Renovation((0.2, 0.2, 0.2, 0.2, 0.2), Conflict.SKIP))):
        prep = PreparedBuffer(model, OPTIMUM, buffer)
        T = prep.tagged(buffer.renovation)
        exits = prep.tagged_exits(buffer.renovation)
        rows = np.asarray(T.sum(axis=1)).ravel() + exits["served"] + exits["expired"] + exits["removed"]
        assert np.abs(rows).max() < 1e-12
        Q = prep.generator(buffer.renovation)
        assert np.abs(np.asarray(Q.sum(axis=1)).ravel()).max() < 1e-12


def test_prepared_reuse_matches_fresh_solves(example: tuple[QueueModel, Costs]) -> None:
    model, _ = example
    buffer = BufferPolicy(timers=False)
    prep = PreparedBuffer(model, OPTIMUM, buffer)
    for q in ((1.0,), (0.6, 0.4), (0.1, 0.2, 0.3, 0.4, 0.0)):
        ren = Renovation(q, Conflict.SKIP)
        fresh = solve_buffer(model, OPTIMUM, BufferPolicy(False, ren))
        reused = solve_buffer(model, OPTIMUM, BufferPolicy(False, ren), prepared=prep)
        assert_same(fresh.measures, reused.measures, rtol=1e-12)
    with pytest.raises(InputError, match="prepared"):
        solve_buffer(model, OPTIMUM, BufferPolicy(True), prepared=prep)


def test_no_renovation_equals_q0_one(example: tuple[QueueModel, Costs]) -> None:
    model, _ = example
    a = solve_buffer(model, OPTIMUM, BufferPolicy(False)).measures
    b = solve_buffer(model, OPTIMUM, BufferPolicy(False, Renovation((1.0, 0.0, 0.0)))).measures
    assert_same(a, b, rtol=1e-12)


@pytest.mark.parametrize(("buffer", "seed"), [
    (BufferPolicy(timers=False, renovation=Renovation((0.5, 0.3, 0.2), Conflict.KEEP_ONE)), 11),
    (BufferPolicy(timers=False, renovation=Renovation((0.3, 0.1, 0.2, 0.2, 0.2), Conflict.SKIP)), 12),
    (BufferPolicy(timers=False, red=RedDrop.linear(1, 4, 0.3, 5)), 13),
    (BufferPolicy(renovation=Renovation((0.5, 0.1, 0.2, 0.1, 0.1), Conflict.SKIP), red=RedDrop.linear(2, 5, 0.5, 5)),
     14),
])
def test_simulation_agrees(example: tuple[QueueModel, Costs], buffer: BufferPolicy, seed: int) -> None:
    """Every exact measure and the cost inside the simulated 99% family-wise intervals (paper example
    traffic, the paper's optimal thresholds)."""
    model, costs = example
    exact = solve_buffer(model, OPTIMUM, buffer).measures
    sim = simulate_buffer(model, OPTIMUM, buffer, np.random.default_rng(seed), events=300_000, costs=costs)
    comparison = sim.check(exact, familywise=True)
    assert comparison.all_inside, str(comparison)


def test_simulation_tells_the_options_apart(example: tuple[QueueModel, Costs]) -> None:
    """The comparison has teeth: simulated under Option 1, the exact Option 2 values fall outside."""
    model, costs = example
    q = (0.2, 0.1, 0.1, 0.2, 0.4)
    sim = simulate_buffer(model, OPTIMUM, BufferPolicy(False, Renovation(q, Conflict.KEEP_ONE)),
                          np.random.default_rng(21), events=300_000, costs=costs)
    wrong = solve_buffer(model, OPTIMUM, BufferPolicy(False, Renovation(q, Conflict.SKIP))).measures
    right = solve_buffer(model, OPTIMUM, BufferPolicy(False, Renovation(q, Conflict.KEEP_ONE))).measures
    assert sim.check(right, familywise=True).all_inside
    outside = sim.check(wrong, familywise=True).outside
    assert {"p_renovated", "mean_queue_length"} <= set(outside)


def test_input_errors(example: tuple[QueueModel, Costs]) -> None:
    model, _ = example
    with pytest.raises(InputError, match=r"^q: sums to"):
        Renovation((0.5, 0.4))
    with pytest.raises(InputError, match=r"^q\[1\]"):
        Renovation((0.5, -0.5, 1.0))
    with pytest.raises(InputError, match=r"^option"):
        Renovation((1.0,), 3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^q: has 6 entries but 4 waiting places"):
        solve_buffer(model, OPTIMUM, BufferPolicy(renovation=Renovation((0.5, 0.1, 0.1, 0.1, 0.1, 0.1))))
    with pytest.raises(InputError, match=r"^red: has 3 drop probabilities but K = 5"):
        solve_buffer(model, OPTIMUM, BufferPolicy(red=RedDrop((0.0, 0.1, 0.2))))
    with pytest.raises(InputError, match=r"^red\.max_th"):
        RedDrop.linear(3, 3, 0.5, 5)
    with pytest.raises(InputError, match=r"^red\.min_th"):
        RedDrop.linear(5, 6, 0.5, 5)


def test_drop_law_follows_the_options() -> None:
    """drop_law against paper 004's wording, case by case."""
    q = (0.1, 0.2, 0.3, 0.4)
    one, two = Renovation(q, Conflict.KEEP_ONE), Renovation(q, Conflict.SKIP)
    assert one.drop_law(0).tolist() == two.drop_law(0).tolist() == [1.0]
    assert one.drop_law(1).tolist() == pytest.approx([1.0])  # one waiting page is never removed
    assert two.drop_law(1).tolist() == pytest.approx([1.0])
    assert one.drop_law(2).tolist() == pytest.approx([0.1, 0.9])  # J >= 2: remove w - 1 = 1
    assert two.drop_law(2).tolist() == pytest.approx([0.8, 0.2])  # J >= 2: remove nothing
    assert one.drop_law(5).tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.0])
    assert one.mean_drop(3) == pytest.approx(0.2 + 2 * 0.7)


def test_sparse_and_dense_stationary_solves_agree(example: tuple[QueueModel, Costs],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from robotctl.model import _buffer_solve

    model, _ = example
    buffer = BufferPolicy(timers=False, renovation=Renovation((0.5, 0.3, 0.2), Conflict.SKIP))
    dense = solve_buffer(model, OPTIMUM, buffer)
    monkeypatch.setattr(_buffer_solve, "DENSE_STATES", 0)
    sparse = solve_buffer(model, OPTIMUM, buffer)
    assert (dense.method, sparse.method) == ("dense-lu", "sparse-lu")
    assert_same(dense.measures, sparse.measures, rtol=1e-11)
