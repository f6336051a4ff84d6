"""Exact reductions (model._reduce): lumped laws give the same measures as the original model, solved
independently by brute force on the original phases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.agent import load_model_file
from robotctl.model import (
    BMAP,
    PH,
    InputError,
    ModeArrivals,
    QueueModel,
    random_bmap,
    random_model,
    random_ph,
    random_policy,
    reduce_model,
    solve,
    solve_bruteforce,
)
from robotctl.model._reduce import lump_ph, truncate_batches

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
          "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete")


def expand_ph(rng: np.random.Generator, law: PH, copies: list[int]) -> PH:
    """A PH with ``copies[a]`` phases for phase a of ``law``, ordinarily lumpable back onto ``law``:
    each copy spreads the rate into every other block at random over that block's copies, moves at a
    random rate within its own block, and exits at the block's rate."""
    S, beta = np.asarray(law.S), np.asarray(law.beta)
    exits = law.exit_rates
    block = [a for a, n in enumerate(copies) for _ in range(n)]
    n = len(block)
    out = np.zeros((n, n))
    for x in range(n):
        a = block[x]
        for b in range(len(copies)):
            members = [y for y in range(n) if block[y] == b]
            if b == a:
                others = [y for y in members if y != x]
                for y in others:
                    out[x, y] = rng.uniform(0.0, 1.0)
            else:
                out[x, members] = S[a, b] * rng.dirichlet(np.ones(len(members)))
        out[x, x] = -(out[x].sum() + exits[a])
    b2 = np.array([beta[block[x]] for x in range(n)]) * np.concatenate([rng.dirichlet(np.ones(c)) for c in copies])
    return PH(b2, out)


def expand_arrivals(rng: np.random.Generator, arrivals: ModeArrivals, copies: list[int]) -> ModeArrivals:
    """Every mode's BMAP with its phases copied, lumpable back (same construction for each D_k; D_0's
    rate within a block is free)."""
    block = [a for a, n in enumerate(copies) for _ in range(n)]
    n = len(block)
    spread = {b: rng.dirichlet(np.ones(copies[b])) for b in range(len(copies))}  # the same split for all
    out = []
    for mode, bmap in arrivals.by_mode:
        mats = []
        for k, D in enumerate(bmap.D):
            E = np.zeros((n, n))
            for x in range(n):
                a = block[x]
                for b in range(len(copies)):
                    members = [y for y in range(n) if block[y] == b]
                    if k == 0 and b == a:
                        continue
                    E[x, members] = D[a, b] * spread[b]
            mats.append(E)
        for x in range(n):
            a = block[x]
            members = [y for y in range(n) if block[y] == a and y != x]
            within = rng.uniform(0.0, 1.0, size=len(members))
            mats[0][x, members] = within
            mats[0][x, x] = 0.0
            mats[0][x, x] = -(sum(M[x].sum() for M in mats))
        out.append((mode, BMAP(tuple(mats))))
    return ModeArrivals(tuple(out))


def assert_same(a, b, rtol: float = 1e-9) -> None:  # type: ignore[no-untyped-def]
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert math.isclose(x, y, rel_tol=rtol, abs_tol=1e-12), f"{name}: {x!r} != {y!r}"


def test_paper_obsolescence_is_exactly_exponential() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    red = reduce_model(model)
    assert red.exact and red.changed
    assert red.orders == ((2, 2, 2), (2, 2, 1))
    assert red.model.obsolescence is not None
    assert red.model.obsolescence.S[0, 0] == pytest.approx(-0.2, rel=1e-12)
    assert red.obsolescence_blocks == ((0, 1),)
    assert "exactly exponential" in red.notes[0]


def test_reduced_paper_example_matches_the_brute_force_on_the_original() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    policy = random_policy(np.random.default_rng(1), model.modes, model.capacity)
    reduced = solve(model, policy)  # reduces by default
    assert reduced.reduction and reduced.n_states < solve(model, policy, reduce=False).n_states
    assert_same(reduced.measures, solve_bruteforce(model, policy).measures)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), capacity=st.integers(1, 5), copies_s=st.lists(st.integers(1, 3), min_size=1,
       max_size=2), copies_o=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       copies_a=st.lists(st.integers(1, 2), min_size=1, max_size=2))
def test_lumped_expansions_reduce_back_with_the_same_measures(seed: int, capacity: int, copies_s: list[int],
                                                             copies_o: list[int], copies_a: list[int]) -> None:
    rng = np.random.default_rng(seed)
    base = random_model(rng, capacity=capacity, arrival_order=len(copies_a), service_order=len(copies_s),
                        obsolescence_order=len(copies_o), modes=(1, 2), max_batch=2)
    assert base.obsolescence is not None
    big = QueueModel(capacity, expand_arrivals(rng, base.arrivals, copies_a), expand_ph(rng, base.service, copies_s),
                     expand_ph(rng, base.obsolescence, copies_o), base.admission)
    red = reduce_model(big)
    assert red.orders[1] == (len(copies_a), len(copies_s), len(copies_o)) and red.exact
    policy = random_policy(rng, big.modes, capacity)
    assert_same(solve(big, policy).measures, solve_bruteforce(big, policy).measures)


def test_unreachable_phases_are_dropped() -> None:
    law = PH(np.array([1.0, 0.0, 0.0]), np.array([[-2.0, 1.0, 0.0], [0.0, -3.0, 0.0], [0.5, 0.5, -3.0]]))
    lumped, part = lump_ph(law)
    assert lumped.order == 2 and part == ((0,), (1,))
    assert lumped.mean == pytest.approx(law.mean, rel=1e-12)
    assert lumped.moment(3) == pytest.approx(law.moment(3), rel=1e-12)


def test_equal_exit_rates_make_a_law_exponential() -> None:
    """Exit rate 1 from both phases: the absorption time is Exp(1) whatever the moves between them."""
    law = PH(np.array([0.3, 0.7]), np.array([[-2.0, 1.0], [4.0, -5.0]]))
    lumped, part = lump_ph(law)
    assert part == ((0, 1),) and lumped.allclose(PH.exponential(1.0))
    assert law.survival(2.5) == pytest.approx(np.exp(-2.5), rel=1e-12)


def test_random_laws_are_left_alone() -> None:
    rng = np.random.default_rng(4)
    model = random_model(rng, capacity=4)
    red = reduce_model(model)
    assert not red.changed and red.model is model and red.exact


def test_batch_truncation_states_its_mass() -> None:
    rng = np.random.default_rng(2)
    bmap = BMAP.from_map(*(lambda b: (b.D0, b.D1))(random_bmap(rng, 2, 1)), batch_probs=(0.6, 0.3, 0.0999, 1e-4))
    arrivals = ModeArrivals.per_mode({1: bmap})
    same, mass = truncate_batches(arrivals, 0.0)
    assert same is arrivals and mass == 0.0
    clipped, mass = truncate_batches(arrivals, 1e-3)
    assert clipped[1].max_batch == 3
    pages_in_4 = 4 * 1e-4 / sum(k * p for k, p in enumerate((0.6, 0.3, 0.0999, 1e-4), start=1))
    assert mass == pytest.approx(pages_in_4, rel=1e-9) and mass <= 1e-3
    # batch epochs are kept, so the batch rate is unchanged and the page rate drops by the clipped pages
    assert clipped[1].batch_rate == pytest.approx(bmap.batch_rate, rel=1e-12)
    model = QueueModel(6, arrivals, PH.exponential(1.0), PH.exponential(0.5))
    red = reduce_model(model, batch_mass=1e-3)
    assert not red.exact and red.batch_mass == pytest.approx(pages_in_4)
    with pytest.raises(InputError, match="batch_mass"):
        reduce_model(model, batch_mass=1.0)


def test_identical_service_phases_lump() -> None:
    """An Erlang-2 written with a redundant copy of its second phase."""
    law = PH(np.array([1.0, 0.0, 0.0]), np.array([[-2.0, 1.5, 0.5], [0.0, -2.0, 0.0], [0.0, 0.0, -2.0]]))
    lumped, part = lump_ph(law)
    assert part == ((0,), (1, 2))
    assert lumped.allclose(PH.erlang(2, 2.0))
    assert random_ph(np.random.default_rng(0), 3).order == lump_ph(random_ph(np.random.default_rng(0), 3))[0].order
