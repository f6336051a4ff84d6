"""The ordered-head ladder and its error bar (model._approx) against exact references: the exact chain
where it can be solved, and the product form (Poisson modes, exponential service) at K = 50."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.model import (
    BMAP,
    PH,
    Costs,
    InputError,
    ModeArrivals,
    QueueLengthPolicy,
    QueueModel,
    cost_of,
    random_model,
    random_ph,
    random_policy,
    solve,
    solve_product_form,
)
from robotctl.model._approx import MEASURE_FIELDS, ApproxStatus, solve_approx, widening

COSTS = Costs(loss=3, obsolescence=4, response=1, robot=2, starvation=20)


def test_small_exact_chains_are_solved_exactly() -> None:
    model = random_model(np.random.default_rng(1), capacity=5)
    policy = random_policy(np.random.default_rng(2), model.modes, 5)
    out = solve_approx(model, policy, COSTS)
    assert out.status is ApproxStatus.EXACT and out.exact and out.method == "exact" and out.error_bound == 0.0
    assert out.cost == pytest.approx(cost_of(solve(model, policy).measures, COSTS).total, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ladder_error_bar_covers_the_exact_chain(seed: int) -> None:
    """K = 9 with two-phase obsolescence; the exact chain (2,046 to 4,094 states) is the reference."""
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=9, obsolescence_order=2, max_batch=2, modes=(1, 2, 3), load=1.4)
    policy = random_policy(rng, model.modes, 9)
    exact = cost_of(solve(model, policy).measures, COSTS).total
    out = solve_approx(model, policy, COSTS, rtol=1e-4, exact_states=0)
    assert out.success and not out.exact and out.status is ApproxStatus.CONVERGED
    assert out.h is not None and out.method == f"ordered-head h={out.h}"
    assert out.cost is not None and abs(out.cost - exact) <= out.error_bound
    assert out.error_bound <= 1e-4 * abs(out.cost) * 10  # the bar is of the size of the tolerance


@pytest.mark.parametrize(("law", "K"), [
    (PH(np.array([0.3, 0.7]), np.array([[-0.9, 0.6], [0.4, -0.5]])), 50),   # mixing phases: fast decay
    (PH.hyperexponential((0.5, 0.5), (0.1, 1.5)), 24),                      # no mixing: slow decay
])
def test_ladder_error_bar_covers_the_product_form(law: PH, K: int) -> None:
    """Poisson modes and exponential service: the product form is exact at any K."""
    arrivals = ModeArrivals.per_mode({m: BMAP.poisson(0.35 * m) for m in range(1, 9)})
    model = QueueModel(K, arrivals, PH.exponential(1.5), law)
    policy = QueueLengthPolicy(tuple(max(1, 8 - i // 3) for i in range(K + 1)))
    exact = solve_product_form(model, policy).measures
    out = solve_approx(model, policy, COSTS, rtol=1e-3)
    assert out.success and out.status is ApproxStatus.CONVERGED
    assert out.cost is not None and abs(out.cost - cost_of(exact, COSTS).total) <= out.error_bound
    for name in MEASURE_FIELDS:
        assert abs(getattr(out.measures, name) - getattr(exact, name)) <= out.measure_errors[name] + 1e-12, name


def test_limited_ladders_say_so() -> None:
    rng = np.random.default_rng(4)
    model = random_model(rng, capacity=12, obsolescence_order=2, max_batch=1, modes=(1, 2))
    policy = random_policy(rng, model.modes, 12)
    out = solve_approx(model, policy, COSTS, rtol=1e-12, exact_states=0, max_states=2500)
    assert out.status is ApproxStatus.LIMITED and out.success and not out.exact
    assert "tolerance not reached" in out.message and math.isfinite(out.error_bound)
    assert out.n_states <= 2500
    with pytest.raises(InputError, match="rtol"):
        solve_approx(model, policy, COSTS, rtol=0.0)


def test_widening_of_slowly_converging_ladders() -> None:
    assert widening([0.1]) == 1.0
    assert widening([0.1, 0.02]) == 1.0  # q = 0.2: the last difference covers twice the geometric rest
    assert widening([0.1, 0.05]) == pytest.approx(2.0)  # q = 0.5: the rest is one more difference, doubled
    assert widening([0.1, 0.08]) == pytest.approx(8.0)
    assert widening([0.1, 0.2]) == pytest.approx(18.0)  # not shrinking: q capped at 0.9
    assert random_ph(np.random.default_rng(0), 2).order == 2


# -- the bracket: the counted page that goes next chosen by phase, urgent first and patient first ---------

def _fleet_policy(K: int) -> QueueLengthPolicy:
    return QueueLengthPolicy(tuple(max(1, 16 - 2 * i) for i in range(K + 1)))


def test_counting_every_page_is_not_fifo() -> None:
    """Why the chain that counts waiting pages by phase (h = 0, C(c + R - 1, R - 1) states a level) is not
    exact for FIFO: it serves the counted pages in random order, and under FIFO the oldest page's phase,
    which decides which count goes down, is not a function of the counts. Against the exact chain at
    K = 6 (16 robots): Erlang-3 lives are over-costed by 0.6%, H3 lives under-costed by 0.07%."""
    from robotctl.model import fleet_model

    for law, low, high in (("erlang3", 0.6, 0.8), ("h3", -0.1, -0.07)):
        model, costs = fleet_model(16, 6, obsolescence=law)
        exact = cost_of(solve(model, _fleet_policy(6)).measures, costs).total
        counted = solve_approx(model, _fleet_policy(6), costs, exact_states=0, h_max=0, method="ladder")
        assert counted.method == "ordered-head h=0" and counted.cost is not None
        assert low < counted.cost - exact < high


@pytest.mark.parametrize(("law", "K", "h"), [("erlang3", 7, 0), ("erlang3", 7, 2), ("h3", 7, 0), ("h3", 7, 3),
                                              ("two-phase", 8, 0), ("deadline", 6, 1)])
def test_bracket_covers_the_exact_chain_of_the_fleets(law: str, K: int, h: int) -> None:
    """The exact cost (block solver, an independent route) lies inside the bracket at every depth, and the
    bracket narrows with h (at K = 7, Erlang-3: half-width 2.8 at h = 0, 0.70 at h = 2)."""
    from robotctl.model import fleet_model

    model, costs = fleet_model(16, K, obsolescence=law)
    policy = _fleet_policy(K)
    exact = cost_of(solve(model, policy).measures, costs).total
    out = solve_approx(model, policy, costs, exact_states=0, h_start=h, h_max=h, method="bracket")
    assert out.success and not out.exact and out.method == f"bracket h={h}" and out.h == h
    assert out.cost is not None and 0.0 < out.error_bound < 0.03 * out.cost
    assert abs(out.cost - exact) <= out.error_bound
    assert out.n_states == out.ladder[-1].n_states


@pytest.mark.parametrize("seed", range(6))
def test_bracket_covers_random_models(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random BMAPs, two- and three-phase lives, random costs: J of the exact chain inside the bracket at
    h = 0 (it was on 160 such models, K = 4-6, during development). The levels are small enough for the
    exact chain to be solved directly, so that shortcut is turned off."""
    from robotctl.model import _approx

    monkeypatch.setattr(_approx, "DENSE_DIM", 0)
    rng = np.random.default_rng(100 + seed)
    K = int(rng.integers(4, 7))
    model = random_model(rng, capacity=K, obsolescence_order=2 + seed % 2, load=float(rng.uniform(0.7, 2.5)))
    policy = random_policy(rng, model.modes, K)
    costs = Costs(loss=float(rng.uniform(0, 20)), obsolescence=float(rng.uniform(0, 20)),
                  response=float(rng.uniform(0, 5)), robot=float(rng.uniform(0, 20)),
                  starvation=float(rng.uniform(0, 300)))
    exact = cost_of(solve(model, policy).measures, costs).total
    out = solve_approx(model, policy, costs, exact_states=0, h_max=0, method="bracket")
    assert out.method == "bracket h=0" and out.cost is not None
    assert abs(out.cost - exact) <= out.error_bound * (1 + 1e-9)


def test_bracket_stops_when_its_ends_agree_and_says_when_time_ran_out() -> None:
    from robotctl.model import fleet_model

    model, costs = fleet_model(16, 6, obsolescence="erlang3")
    policy = _fleet_policy(6)
    exact = cost_of(solve(model, policy).measures, costs).total
    out = solve_approx(model, policy, costs, exact_states=0, method="bracket", rtol=1e-2)
    assert out.status is ApproxStatus.CONVERGED and out.cost is not None
    assert out.error_bound <= 1e-2 * out.cost and abs(out.cost - exact) <= out.error_bound
    limited = solve_approx(model, policy, costs, exact_states=0, method="bracket", max_seconds=1e-9)
    assert limited.status is ApproxStatus.LIMITED and limited.budget_exhausted and limited.h == 0
    assert "time budget" in limited.message and math.isfinite(limited.error_bound)
    whole = solve_approx(model, policy, costs, exact_states=0, method="bracket")
    assert whole.status is ApproxStatus.EXACT and whole.cost == pytest.approx(exact, rel=1e-9)


def test_auto_picks_the_bracket_when_the_ladder_would_be_large(monkeypatch: pytest.MonkeyPatch) -> None:
    from robotctl.model import _approx, fleet_model

    model, costs = fleet_model(16, 6, obsolescence="h3")
    policy = _fleet_policy(6)
    assert solve_approx(model, policy, costs, exact_states=0, h_max=2).method.startswith("ordered-head")
    monkeypatch.setattr(_approx, "LADDER_STATES", 500)  # the depth-2 chain has 738 states
    assert solve_approx(model, policy, costs, exact_states=0, h_max=2).method.startswith("bracket")
    with pytest.raises(InputError, match="method"):
        solve_approx(model, policy, costs, method="exactly")


def test_promotion_orders_of_the_level_chain() -> None:
    from robotctl.model import fleet_model
    from robotctl.model._levels import LevelChain

    model, _ = fleet_model(16, 6, obsolescence="erlang3")
    urgent = LevelChain(model, 0, "urgent")
    assert urgent.counts.order == (2, 1, 0) and urgent.label == "ordered-head h=0 (urgent next)"
    assert LevelChain(model, 0, "patient").counts.order == (0, 1, 2)
    assert LevelChain(model, None, "patient").promotion == "random"  # exact: nothing is counted
    with pytest.raises(ValueError, match="promotion"):
        LevelChain(model, 0, "oldest")
    patient = LevelChain(model, 0, "patient", share=urgent)
    assert patient.A(5) is urgent.A(5) and patient.up(3, 2) is urgent.up(3, 2)  # built once
    assert patient.counts.generator(4) is urgent.counts.generator(4)
    assert not np.allclose(patient.down(5), urgent.down(5))  # the next page differs
    with pytest.raises(ValueError, match="same model and depth"):
        LevelChain(model, 1, "patient", share=urgent)


@pytest.mark.parametrize("law", ["two-phase", "erlang3"])
def test_a_cut_chain_sharing_its_whole_chains_blocks_solves_the_cut_model(law: str) -> None:
    """A chain of the model cut at L < K built with ``share=`` the whole chain reuses the blocks of the levels
    far from L and builds its own near L, where fewer pages of a batch are admitted: its rates equal those of
    the cut chain built alone (an independent build), for policies that reach L, whatever was built first."""
    from robotctl.model import LevelChain, PolicyEvaluator, fleet_model

    model, costs = fleet_model(6, 24, obsolescence=law)
    # (small levels near the cut at L = 6: their blocks are kept by the evaluator too)
    for policy in [(6,) * 16, (6,) * 5 + (3,) * 6 + (1,) * 5, (1,) * 16, (6,) * 7, (3,) * 4 + (1,) * 3]:
        cut = dataclasses.replace(model, capacity=len(policy) - 1)
        whole = LevelChain(model, 0)
        PolicyEvaluator(whole, (*policy, *(policy[-1],) * (24 - cut.capacity)), levels=True).rates()  # built first
        shared = LevelChain(cut, 0, share=whole)
        alone = LevelChain(cut, 0)
        got = PolicyEvaluator(shared, policy, levels=True).rates()
        want = PolicyEvaluator(alone, policy, levels=True).rates()
        assert got.levels is not None and want.levels is not None and want.levels[-1] > 1e-6  # reaches the cut
        assert got.cost(costs) == pytest.approx(want.cost(costs), rel=1e-12)
        np.testing.assert_allclose(got.levels, want.levels, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-15)
    cut = dataclasses.replace(model, capacity=15)
    whole = LevelChain(model, 0)
    shared = LevelChain(cut, 0, share=whole)
    assert shared.A(8) is whole.A(8) and shared.rate_columns(6, 3) is whole.rate_columns(6, 3)  # built once
    assert not np.allclose(shared.rate_columns(6, 14), whole.rate_columns(6, 14))  # fewer admitted near L
    assert all(len(v) == 15 for v in shared.tagged) and shared.tagged[0][9] is whole.tagged[0][9]
    other = dataclasses.replace(model, capacity=30)
    with pytest.raises(ValueError, match="same model and depth"):
        LevelChain(other, 0, share=whole)  # a larger capacity cannot take a smaller chain's blocks
    with pytest.raises(ValueError, match="same model and depth"):
        LevelChain(dataclasses.replace(cut, service=PH.exponential(2.0)), 0, share=whole)


def test_deadline_route_tends_to_the_true_deadline() -> None:
    """A deterministic deadline: the urgent-next chains of 1..k Erlang phases, checked against the simulator
    drawing the true constant (an independent route); the one-phase chain is the exponential law's exact
    chain (one phase: order cannot matter)."""
    from robotctl.model import fleet_model, simulate_events
    from robotctl.model._deadline import deadline_law

    model, costs = fleet_model(16, 8, obsolescence="deadline")
    policy = _fleet_policy(8)
    out = solve_approx(model, policy, costs, method="deadline", rtol=1e-3)
    assert out.status is ApproxStatus.CONVERGED and out.method == "deadline k=6" and out.cost is not None
    assert [s.engine.split(",")[0] for s in out.ladder] == [f"deadline k={k}" for k in range(1, 7)]
    costs_by_k = [s.cost for s in out.ladder]
    assert all(a > b for a, b in zip(costs_by_k, costs_by_k[1:]))  # towards the deadline from above
    one = dataclasses.replace(model, obsolescence=deadline_law(10.0, 1), deadline=None)
    assert out.ladder[0].cost == pytest.approx(cost_of(solve(one, policy).measures, costs).total, rel=1e-8)
    sim = simulate_events(model, policy, np.random.default_rng(5), events=400_000, costs=costs)
    assert sim.cost is not None
    assert abs(out.cost - sim.cost.value) <= out.error_bound + 2 * sim.cost.half_width
    assert 0.0 < out.error_bound < 1e-3 * out.cost * 2
    short = solve_approx(model, policy, costs, method="deadline", max_seconds=1e-9)
    assert short.method == "deadline k=3" and short.budget_exhausted and "time budget" in short.message
    # the Erlang law's own FIFO chain is farther from the deadline than the bar
    law_cost = cost_of(solve(model, policy).measures, costs).total
    assert abs(law_cost - sim.cost.value) > abs(out.cost - sim.cost.value)
    with pytest.raises(InputError, match="deadline"):
        solve_approx(dataclasses.replace(model, deadline=None), policy, costs, method="deadline")


def test_a_given_chain_is_reused_for_the_first_depth() -> None:
    """``chain``: the search chain is evaluated in place at its depth (its blocks kept on it), with the same
    answer as a chain built afresh; a chain of another model is ignored."""
    from robotctl.model import LevelChain, fleet_model

    model, costs = fleet_model(4, 12, obsolescence="two-phase")
    policy = QueueLengthPolicy((4, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1))
    fresh = solve_approx(model, policy, costs, exact_states=0)
    chain = LevelChain(model, 0)
    reused = solve_approx(model, policy, costs, exact_states=0, chain=chain)
    assert chain.evaluator_caches  # the ladder's first depth ran on it
    assert reused.cost == pytest.approx(fresh.cost, rel=1e-12)
    assert reused.error_bound == pytest.approx(fresh.error_bound, rel=1e-9)
    deeper = LevelChain(model, 1)
    assert solve_approx(model, policy, costs, exact_states=0, chain=deeper).cost == pytest.approx(fresh.cost,
                                                                                                  rel=1e-12)
    assert deeper.evaluator_caches  # used at depth 1
    other = LevelChain(dataclasses.replace(model), 0)  # an equal model, not the one solved
    ignored = solve_approx(model, policy, costs, exact_states=0, chain=other)
    assert not other.evaluator_caches and ignored.cost == pytest.approx(fresh.cost, rel=1e-12)


def test_the_ladder_cuts_levels_the_policy_never_reaches_with_the_same_answer(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """Past its first depth the ladder solves the chains of the model cut at the level L where the first
    depth puts at most CUT_TAIL within a batch of L (issue 26: 32 robots at K = 100, L = 33; here L = 36):
    the same cost, bar and measures as the whole chains, far fewer states; a cut chain whose own mass near
    the cut exceeds CUT_CHECK is given up for the whole one."""
    from robotctl.model import ThresholdPolicy, _approx, fleet_model

    model, costs = fleet_model(16, 50, obsolescence="two-phase")
    policy = ThresholdPolicy((16,) * 9 + (1,) * 42)  # the optimum of bench/scale.py's fleet16_two
    cut = solve_approx(model, policy, costs, rtol=1e-3, exact_states=0)
    real_cut = _approx._cut_model
    monkeypatch.setattr(_approx, "_cut_model", lambda *args: None)
    whole = solve_approx(model, policy, costs, rtol=1e-3, exact_states=0)
    assert [s.h for s in cut.ladder] == [s.h for s in whole.ladder] and len(cut.ladder) >= 3
    first, *deeper = cut.ladder
    assert first.n_states == whole.ladder[0].n_states
    for a, b in zip(deeper, whole.ladder[1:]):
        assert a.n_states < 0.75 * b.n_states and "levels 0.." in a.engine
    assert cut.cost == pytest.approx(whole.cost, rel=1e-10)
    assert cut.error_bound == pytest.approx(whole.error_bound, rel=1e-6)
    for name in MEASURE_FIELDS:
        # probabilities move by about the mass cut off, which the cut keeps below CUT_CHECK
        assert getattr(cut.measures, name) == pytest.approx(getattr(whole.measures, name), rel=1e-9,
                                                            abs=_approx.CUT_CHECK)
    assert len(cut.measures.queue_length_distribution) == 51
    # each measure's bar holds against the whole chains': P_loss's only with the cut's losses in it (1.2e-14
    # on the cut against 3e-22, where the depths' difference is 1.6e-16)
    for name in MEASURE_FIELDS:
        gap = abs(getattr(cut.measures, name) - getattr(whole.measures, name))
        assert gap <= cut.measure_errors[name] + whole.measure_errors[name], name
    assert cut.measure_errors["p_loss"] >= cut.measures.p_loss > 1e3 * whole.measures.p_loss
    monkeypatch.setattr(_approx, "_cut_model", real_cut)
    monkeypatch.setattr(_approx, "CUT_CHECK", 0.0)  # every cut chain fails its check
    refused = solve_approx(model, policy, costs, rtol=1e-3, exact_states=0)
    assert [s.n_states for s in refused.ladder] == [s.n_states for s in whole.ladder]
    assert refused.cost == pytest.approx(whole.cost, rel=1e-12)


def test_rates_with_levels_cut_where_a_hint_says_and_checked() -> None:
    """rates_with_levels: with the exponential surrogate's level distribution as the hint, the search chain
    cut where the hint's tail vanishes gives the whole chain's rates (to rounding) with P(level) zero above
    the cut; a hint that puts everything on level 0 cuts too low, the cut chain fails its check, and the
    whole chain is solved."""
    from robotctl.model import LevelChain, PolicyEvaluator, ThresholdPolicy, fleet_model, rates_with_levels
    from robotctl.model._approx import CUT_CHECK

    model, costs = fleet_model(16, 50, obsolescence="two-phase")
    policy = ThresholdPolicy((16,) * 9 + (1,) * 42).robots_at_level
    chain = LevelChain(model, 0)
    whole = PolicyEvaluator(chain, policy, levels=True).rates()
    assert model.obsolescence is not None
    surrogate = dataclasses.replace(model, obsolescence=PH.exponential(1.0 / model.obsolescence.mean))
    hint = PolicyEvaluator(LevelChain(surrogate), policy, levels=True).rates().levels
    cut = rates_with_levels(chain, policy, hint=hint)
    assert cut.levels is not None and whole.levels is not None
    top = int(np.flatnonzero(cut.levels)[-1])
    assert top < 45 and whole.levels[top + 1:].sum() > 0  # cut, where the whole chain has some mass
    assert cut.cost(costs) == pytest.approx(whole.cost(costs), rel=1e-12)
    assert np.abs(cut.levels - whole.levels).max() <= CUT_CHECK
    wrong = np.zeros(51)
    wrong[0] = 1.0
    refused = rates_with_levels(chain, policy, hint=wrong)
    assert refused.levels is not None and refused.levels[-1] > 0  # the whole chain
    assert refused.cost(costs) == pytest.approx(whole.cost(costs), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(7, 12), cut_at=st.integers(4, 11), h=st.sampled_from([0, 1]),
       reject=st.booleans())
def test_a_shared_cut_chain_equals_one_built_alone_on_random_models(seed: int, K: int, cut_at: int, h: int,
                                                                    reject: bool) -> None:
    """Property: on random models (batches of 1-3, both admission rules, depths 0 and 1) and random policies,
    the chain of the model cut at L built with ``share=`` the whole chain (after the whole chain built its
    blocks for the same policy) gives the rates of the cut chain built alone."""
    from robotctl.model import Admission, LevelChain, PolicyEvaluator

    L = min(cut_at, K - 1)
    rng = np.random.default_rng(seed)
    admission = Admission.REJECT_BATCH if reject else Admission.PARTIAL
    model = random_model(rng, capacity=K, admission=admission, load=float(rng.uniform(0.5, 2.0)))
    policy = random_policy(rng, model.modes, K).robots_at_level
    cut = dataclasses.replace(model, capacity=L)
    whole = LevelChain(model, h)
    if whole.exact or h >= L - 2:
        return  # no cut chain of this depth (rates_with_levels does not cut there)
    PolicyEvaluator(whole, policy, levels=True).rates()
    got = PolicyEvaluator(LevelChain(cut, h, share=whole), policy[:L + 1], levels=True).rates()
    want = PolicyEvaluator(LevelChain(cut, h), policy[:L + 1], levels=True).rates()
    assert got.levels is not None and want.levels is not None
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(got.levels, want.levels, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize(("K", "h"), [(8, None), (9, 6), (16, 2)])
def test_rates_with_levels_on_a_chain_whose_cut_would_be_exact_solves_the_chain(K: int, h: int | None) -> None:
    """An exact chain, or a depth that is exact for the cut model: no cut (its exact chain may be far larger),
    the chain itself is solved, whatever the hint says."""
    from robotctl.model import LevelChain, PolicyEvaluator, fleet_model, rates_with_levels

    model, costs = fleet_model(4, K, obsolescence="two-phase")
    chain = LevelChain(model, h)
    policy = (4,) * 2 + (1,) * (K - 1)
    hint = np.zeros(K + 1)
    hint[0] = 1.0  # cuts at the lowest level allowed
    got = rates_with_levels(chain, policy, hint=hint)
    want = PolicyEvaluator(chain, policy, levels=True).rates()
    assert got.levels is not None and want.levels is not None and got.levels[-1] == want.levels[-1]
    assert got.cost(costs) == pytest.approx(want.cost(costs), rel=1e-13)


@pytest.mark.parametrize("hint", [np.ones(7), np.full(51, np.nan), -np.ones(51) / 51])
def test_a_hint_that_is_not_a_level_distribution_is_refused_by_name(hint: np.ndarray) -> None:
    from robotctl.model import LevelChain, fleet_model, rates_with_levels

    model, _ = fleet_model(4, 50, obsolescence="two-phase")
    with pytest.raises(InputError, match="hint"):
        rates_with_levels(LevelChain(model, 0), (4,) * 51, hint=hint)


def test_given_rates_of_another_capacity_are_refused_by_name() -> None:
    from robotctl.model import LevelChain, PolicyEvaluator, fleet_model

    model, costs = fleet_model(4, 12, obsolescence="two-phase")
    other = dataclasses.replace(model, capacity=10)
    wrong = PolicyEvaluator(LevelChain(other, 0), (4,) * 11, levels=True).rates()
    with pytest.raises(InputError, match="rates"):
        solve_approx(model, QueueLengthPolicy((4,) * 13), costs, exact_states=0, chain=LevelChain(model, 0),
                     rates=wrong)
