"""The level-structured chain and its evaluator (model._levels, model._evaluate).

- The exact chain (h >= K - 2) against the block solver and, for queue-length policies that are not
  monotone, against the independent brute-force generator: every measure to 1e-9.
- Every one-level change costed from the censored chain against a full evaluation of the changed policy.
- The ordered-head chain of depth h against an independent enumeration of its states and transitions,
  written here from its definition (not through Kronecker products).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.model import (
    Admission,
    Costs,
    LevelChain,
    PolicyEvaluator,
    QueueLengthPolicy,
    QueueModel,
    cost_of,
    random_model,
    random_policy,
    solve,
    solve_bruteforce,
)
from robotctl.model._counts import compositions

FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
          "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")
COSTS = Costs(loss=3, obsolescence=4, response=1, robot=2, starvation=20)

models = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "capacity": st.integers(1, 6),
    "arrival_order": st.integers(1, 2),
    "service_order": st.integers(1, 2),
    "obsolescence_order": st.sampled_from([None, 1, 2]),
    "max_batch": st.integers(1, 4),
    "modes": st.sampled_from([(1,), (1, 2), (1, 3), (1, 2, 3)]),
    "load": st.floats(0.3, 2.0),
    "admission": st.sampled_from(list(Admission)),
})


def any_policy(rng: np.random.Generator, modes: tuple[int, ...], K: int) -> QueueLengthPolicy:
    """A queue-length policy with modes in any order (monotone or not)."""
    return QueueLengthPolicy(tuple(int(m) for m in rng.choice(modes, size=K + 1)))


def assert_close(a, b, rtol: float = 1e-9) -> None:  # type: ignore[no-untyped-def]
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert math.isclose(x, y, rel_tol=rtol, abs_tol=1e-12), f"{name}: {x!r} != {y!r}"
    np.testing.assert_allclose(a.queue_length_distribution, b.queue_length_distribution, rtol=rtol, atol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models)
def test_exact_chain_agrees_with_the_block_solver(params: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    policy = random_policy(rng, model.modes, model.capacity)
    rates = PolicyEvaluator(LevelChain(model), policy.robots_at_level, levels=True).rates()
    assert rates.consistency < 1e-10  # served pages counted twice: by S_0 and through the tagged page
    assert_close(rates.measures(policy.robots_at_level), solve(model, policy, reduce=False).measures)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models)
def test_queue_length_policies_agree_with_the_brute_force(params: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    policy = any_policy(rng, model.modes, model.capacity)
    rates = PolicyEvaluator(LevelChain(model), policy.robots_at_level, levels=True).rates()
    assert_close(rates.measures(policy.robots_at_level), solve_bruteforce(model, policy).measures)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models, st.integers(0, 10**6), st.sampled_from([None, 0, 1, 2]))
def test_one_level_changes_match_full_evaluations(params: dict, pick: int, h: int | None) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    K = model.capacity
    chain = LevelChain(model, h)
    policy = list(any_policy(rng, model.modes, K).robots_at_level)
    ev = PolicyEvaluator(chain, policy)
    for step in range(3):  # changes accepted in between exercise the lazy passes
        i = (pick + 7 * step) % (K + 1)
        costs = ev.costs_at(i, model.modes, COSTS)
        for mode, c in zip(model.modes, costs):
            changed = [*ev.policy[:i], mode, *ev.policy[i + 1:]]
            full = PolicyEvaluator(chain, changed).rates().cost(COSTS)
            assert c == pytest.approx(full, rel=1e-10)
        ev.set_mode(i, model.modes[(pick + step) % len(model.modes)])
    assert ev.rates().cost(COSTS) == pytest.approx(PolicyEvaluator(chain, ev.policy).rates().cost(COSTS), rel=1e-10)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models, st.sampled_from([None, 0, 1]), st.booleans())
def test_static_fleets_in_one_stacked_pass_match_one_pass_each(params: dict, h: int | None, levels: bool) -> None:
    """PolicyEvaluator.static_rates (every static fleet in one backward pass, the fleets stacked) against a
    new evaluator per fleet: the same rate columns and level distribution; the evaluator's own policy is
    left as it was. (Dropping B_{j,l} from the update of B_{j,l-1} fails it.)"""
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    K = model.capacity
    chain = LevelChain(model, h)
    current = tuple(int(m) for m in rng.choice(model.modes, size=K + 1))
    ev = PolicyEvaluator(chain, current, levels=levels)
    before = ev.rates()
    stacked = ev.static_rates(model.modes)
    assert ev.policy == list(current)
    for m, row in zip(model.modes, stacked):
        alone = PolicyEvaluator(LevelChain(model, h), (m,) * (K + 1), levels=levels).rates()
        np.testing.assert_allclose(row[:len(alone.values)], alone.values, rtol=1e-9, atol=1e-13)
        if levels:
            assert alone.levels is not None
            np.testing.assert_allclose(row[len(alone.values):], alone.levels, rtol=1e-9, atol=1e-13)
    after = ev.rates()
    np.testing.assert_allclose(after.values, before.values, rtol=1e-12, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_count_operators_put_each_entry_in_a_place_of_its_own(R: int, c: int, a: int, seed: int) -> None:
    """The counted pages' operators are assembled by assigning their entries (model._matrices._csr, which
    relies on no two entries sharing a place): against an independent route, each operator's rows sum as
    the rates they carry do, and a new pages at once equal a one-page steps multiplied."""
    from robotctl.model import random_ph
    from robotctl.model._counts import _Counts
    from robotctl.model._matrices import to_dense

    rng = np.random.default_rng(seed)
    law = random_ph(rng, R)
    counts = _Counts(law.beta, law.S)
    step = to_dense(counts.add(c, 1))
    np.testing.assert_allclose(step.sum(axis=1), 1.0, rtol=1e-12)
    product = np.eye(step.shape[0])
    for b in range(c, c + a):
        product = product @ to_dense(counts.add(b, 1))
    np.testing.assert_allclose(to_dense(counts.add(c, a)), product, rtol=1e-10, atol=1e-14)
    if c >= 1:
        n = counts.array(c)
        expire = to_dense(counts.expire(c))
        np.testing.assert_allclose(expire.sum(axis=1), n @ counts.Gamma0, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(to_dense(counts.remove_next(c)).sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(to_dense(counts.promote(c)).sum(axis=1), 1.0, rtol=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1), st.booleans())
def test_dense_matrices_become_the_same_sparse_ones_as_scipy_makes(rows: int, cols: int, density: float, seed: int,
                                                                  transposed: bool) -> None:
    """model._matrices.csr_from_dense (positions from a boolean mask's flat indices) against scipy's own
    conversion, on matrices of any shape and density, C-ordered or transposed views: the same entries, in
    canonical CSR (sorted, no duplicates), as the Kronecker and iterative code paths expect."""
    from robotctl.model._matrices import csr_from_dense, dense_entries

    rng = np.random.default_rng(seed)
    m = np.where(rng.random((rows, cols)) < density, rng.normal(size=(rows, cols)), 0.0)
    m = m.T if transposed else m
    ours, theirs = csr_from_dense(m), sp.csr_matrix(m)
    assert ours.shape == theirs.shape and ours.has_canonical_format
    assert (ours != theirs).nnz == 0
    r, c, v = dense_entries(m)
    np.testing.assert_array_equal(m[r, c], v)
    assert len(v) == np.count_nonzero(m)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 60), st.integers(0, 2**32 - 1),
       st.sampled_from(["csr", "csc"]), st.booleans())
def test_sparse_matrices_from_entries_are_scipys(rows: int, cols: int, count: int, seed: int, fmt: str,
                                                 duplicates: bool) -> None:
    """model._matrices.sparse_from_entries (scipy's COO-to-CSR routine called once) against scipy's public
    constructor on random entries, in both formats: the same matrix; with ``duplicates`` entries that
    share a place are summed (as a Kronecker sum's diagonals must be), and the result is canonical."""
    from robotctl.model._matrices import sparse_from_entries

    rng = np.random.default_rng(seed)
    if duplicates:
        r, c = rng.integers(0, rows, count), rng.integers(0, cols, count)
    else:
        flat = rng.choice(rows * cols, size=min(count, rows * cols), replace=False)
        r, c = np.divmod(flat, cols)
    v = rng.normal(size=r.size)
    ours = sparse_from_entries(r, c, v, (rows, cols), fmt=fmt, duplicates=duplicates)
    theirs = sp.coo_matrix((v, (r, c)), shape=(rows, cols))
    assert ours.format == fmt and ours.shape == (rows, cols)
    np.testing.assert_allclose(ours.toarray(), theirs.toarray(), rtol=1e-14, atol=1e-14)
    if duplicates:
        assert ours.has_canonical_format


@pytest.mark.parametrize(("row", "col"), [(-1, 0), (3, 0), (0, -1), (0, 4)])
def test_an_entry_outside_the_matrix_is_refused_not_written(row: int, col: int) -> None:
    """sparse_from_entries hands its indices to a C routine that does not check them: an entry outside the
    matrix must raise, not write outside the arrays."""
    from robotctl.model._matrices import sparse_from_entries

    with pytest.raises(ValueError, match="outside the 3 x 4 matrix"):
        sparse_from_entries(np.array([0, row]), np.array([0, col]), np.array([1.0, 2.0]), (3, 4))


def test_cost_matches_cost_of_measures() -> None:
    model = random_model(np.random.default_rng(3), capacity=5)
    policy = random_policy(np.random.default_rng(4), model.modes, 5)
    rates = PolicyEvaluator(LevelChain(model), policy.robots_at_level, levels=True).rates()
    assert rates.cost(COSTS) == pytest.approx(cost_of(rates.measures(policy.robots_at_level), COSTS).total,
                                              rel=1e-13)


# -- the ordered-head chain, enumerated from its definition ------------------------------------------
def _ordered_head_generator(model: QueueModel, policy: QueueLengthPolicy, h: int
                            ) -> tuple[list[tuple], sp.csr_matrix]:
    """States (i, nu, m, ordered phases, counts) and every transition written out by hand: the h oldest
    waiting pages keep their phases in order, the others are counted by phase; a counted page chosen at
    random (n_r / c) takes the last ordered place when an ordered one leaves."""
    K = model.capacity
    beta, S = model.service.beta, model.service.S
    S0 = -S.sum(axis=1)
    assert model.obsolescence is not None
    gamma, G = model.obsolescence.beta, model.obsolescence.S
    G0 = -G.sum(axis=1)
    M, R, W = beta.size, gamma.size, model.arrivals.order
    states: list[tuple] = [(0, nu, -1, (), ()) for nu in range(W)]
    for i in range(1, K + 1):
        o = min(i - 1, h)
        c = i - 1 - o
        for nu, m in itertools.product(range(W), range(M)):
            for rs in itertools.product(range(R), repeat=o):
                for cnt in (compositions(c, R) if c else [()]):
                    states.append((i, nu, m, rs, cnt))
    index = {s: n for n, s in enumerate(states)}
    rates: dict[tuple[int, int], float] = defaultdict(float)

    def add(a: tuple, b: tuple, r: float) -> None:
        if r > 0 and a != b:
            rates[index[a], index[b]] += r

    def canon(i: int, nu: int, m: int, rs: tuple, cnt: tuple) -> tuple:
        return (i, nu, m, tuple(rs), tuple(cnt) if cnt and sum(cnt) else ())

    def append(rs: tuple, cnt: tuple, a: int) -> dict[tuple, float]:
        out = {(rs, cnt): 1.0}
        for _ in range(a):
            nxt: dict[tuple, float] = defaultdict(float)
            for (r0, c0), p in out.items():
                for r in range(R):
                    if len(r0) < h and not (c0 and sum(c0)):
                        nxt[((*r0, r), c0)] += p * gamma[r]
                    else:
                        c1 = list(c0) if c0 else [0] * R
                        c1[r] += 1
                        nxt[(r0, tuple(c1))] += p * gamma[r]
            out = nxt
        return out

    def leave(rs: tuple, cnt: tuple, j: int) -> dict[tuple, float]:
        r2 = rs[:j] + rs[j + 1:]
        if not (cnt and sum(cnt)):
            return {(r2, ()): 1.0}
        c = sum(cnt)
        out = {}
        for r in range(R):
            if cnt[r]:
                c1 = list(cnt)
                c1[r] -= 1
                out[((*r2, r), tuple(c1))] = cnt[r] / c
        return out

    for s in states:
        i, nu, m, rs, cnt = s
        bmap = model.arrivals[policy.robots_at_level[i]]
        for nu2 in range(W):
            add(s, (i, nu2, m, rs, cnt), bmap.D[0][nu, nu2])
        for k in range(1, bmap.max_batch + 1):
            for nu2 in range(W):
                rate = bmap.D[k][nu, nu2]
                a = model.admission.admitted(k, K - i)
                if rate <= 0:
                    continue
                if a == 0:
                    add(s, (i, nu2, m, rs, cnt), rate)
                elif i == 0:
                    for m2 in range(M):
                        for (r1, c1), p in append((), (), a - 1).items():
                            add(s, canon(a, nu2, m2, r1, c1), rate * beta[m2] * p)
                else:
                    for (r1, c1), p in append(rs, cnt, a).items():
                        add(s, canon(i + a, nu2, m, r1, c1), rate * p)
        if i == 0:
            continue
        for m2 in range(M):
            if m2 != m:
                add(s, (i, nu, m2, rs, cnt), S[m, m2])
        if i == 1:
            add(s, (0, nu, -1, (), ()), S0[m])
        elif h == 0:
            c = sum(cnt)
            for r in range(R):
                if cnt[r]:
                    c1 = list(cnt)
                    c1[r] -= 1
                    for m2 in range(M):
                        add(s, canon(i - 1, nu, m2, (), tuple(c1)), S0[m] * beta[m2] * cnt[r] / c)
        else:
            for (r1, c1), p in leave(rs, cnt, 0).items():
                for m2 in range(M):
                    add(s, canon(i - 1, nu, m2, r1, c1), S0[m] * beta[m2] * p)
        for j, r in enumerate(rs):
            for r2 in range(R):
                if r2 != r:
                    add(s, (i, nu, m, (*rs[:j], r2, *rs[j + 1:]), cnt), G[r, r2])
            for (r1, c1), p in leave(rs, cnt, j).items():
                add(s, canon(i - 1, nu, m, r1, c1), G0[r] * p)
        for r in range(R) if cnt else ():
            if not cnt[r]:
                continue
            for r2 in range(R):
                if r2 != r:
                    c1 = list(cnt)
                    c1[r] -= 1
                    c1[r2] += 1
                    add(s, (i, nu, m, rs, tuple(c1)), cnt[r] * G[r, r2])
            c1 = list(cnt)
            c1[r] -= 1
            add(s, canon(i - 1, nu, m, rs, tuple(c1)), cnt[r] * G0[r])
    n = len(states)
    rows, cols = zip(*rates)
    Q = sp.csr_matrix((list(rates.values()), (rows, cols)), shape=(n, n))
    return states, sp.csr_matrix(Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel()))


def _enumerated_rates(model: QueueModel, policy: QueueLengthPolicy, h: int) -> dict[str, float]:
    states, Q = _ordered_head_generator(model, policy, h)
    n = len(states)
    A = Q.T.tolil()
    A[0, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[0] = 1.0
    p = spla.spsolve(A.tocsc(), rhs)
    K = model.capacity
    S0 = -model.service.S.sum(axis=1)
    assert model.obsolescence is not None
    G0 = -model.obsolescence.S.sum(axis=1)
    out = dict.fromkeys(("offered", "lost", "served", "obsolete", "starvation", "queue"), 0.0)
    for (i, nu, m, rs, cnt), ps in zip(states, p):
        bmap = model.arrivals[policy.robots_at_level[i]]
        for k in range(1, bmap.max_batch + 1):
            batch = ps * bmap.D[k][nu].sum()
            out["offered"] += k * batch
            out["lost"] += (k - model.admission.admitted(k, K - i)) * batch
        out["queue"] += i * ps
        if i == 0:
            out["starvation"] += ps
            continue
        out["served"] += ps * S0[m]
        out["obsolete"] += ps * (sum(G0[r] for r in rs) + sum(c * G0[r] for r, c in enumerate(cnt)))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), capacity=st.integers(3, 6), R=st.sampled_from([2, 3]),
       max_batch=st.integers(1, 4), admission=st.sampled_from(list(Admission)), h=st.integers(0, 4))
def test_ordered_head_chain_matches_its_enumeration(seed: int, capacity: int, R: int, max_batch: int,
                                                    admission: Admission, h: int) -> None:
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=capacity, obsolescence_order=R, max_batch=max_batch, admission=admission,
                         modes=(1, 2, 3))
    policy = any_policy(rng, model.modes, capacity)
    h = min(h, capacity - 2)
    chain = LevelChain(model, h)
    ref = _enumerated_rates(model, policy, h)
    assert chain.n_states == len(_ordered_head_generator(model, policy, h)[0])
    r = PolicyEvaluator(chain, policy.robots_at_level, levels=True).rates()
    m = r.measures(policy.robots_at_level)
    assert m.arrival_rate == pytest.approx(ref["offered"], rel=1e-9)
    assert m.p_loss * m.arrival_rate == pytest.approx(ref["lost"], rel=1e-9, abs=1e-13)
    assert m.p_obsolete * m.arrival_rate == pytest.approx(ref["obsolete"], rel=1e-9)
    assert m.p_success * m.arrival_rate == pytest.approx(ref["served"], rel=1e-9)
    assert m.p_starvation == pytest.approx(ref["starvation"], rel=1e-9)
    assert m.mean_queue_length == pytest.approx(ref["queue"], rel=1e-9)


@pytest.mark.parametrize("h", [0, 1, 2])
def test_depth_k_minus_2_is_exact_and_errors_shrink_with_depth(h: int) -> None:
    rng = np.random.default_rng(11)
    model = random_model(rng, capacity=6, obsolescence_order=2, max_batch=2, modes=(1, 3), load=1.4)
    policy = random_policy(rng, model.modes, 6)
    exact = PolicyEvaluator(LevelChain(model), policy.robots_at_level).rates().cost(COSTS)
    top = PolicyEvaluator(LevelChain(model, 4), policy.robots_at_level).rates().cost(COSTS)
    assert LevelChain(model, 4).exact and top == pytest.approx(exact, rel=1e-12)
    errors = [abs(PolicyEvaluator(LevelChain(model, k), policy.robots_at_level).rates().cost(COSTS) - exact)
              for k in (h, h + 1)]
    assert errors[1] < errors[0]


@pytest.mark.parametrize("h", [0, 1])
def test_large_levels_agree_with_the_iterative_solver(h: int) -> None:
    """Levels above the evaluator's small-block size (the diagonal block assembled in place, the wide forward
    solves through the inverse) and evaluations switching every level (censored on the cheaper end), against
    the matrix-free Krylov solver of the same chain, an independent route."""
    from robotctl.model._iterative import rates_from_levels, stationary_iterative

    rng = np.random.default_rng(5)
    model = random_model(rng, capacity=24, obsolescence_order=2, max_batch=3, modes=(1, 2, 4), load=1.2)
    chain = LevelChain(model, h)
    assert chain.max_dim >= 64
    ev = PolicyEvaluator(chain, (4,) * 25)
    policies = [(4,) * 25, (1,) * 25, (4,) * 10 + (2,) * 15, (4,) * 3 + (1,) * 22, (2,) * 25]
    for r in policies:
        res = stationary_iterative(chain, r)
        assert res.converged
        ref = rates_from_levels(chain, r, res.level_vectors)
        got = ev.evaluate(r)
        np.testing.assert_allclose(got.values, ref[:len(got.values)], rtol=1e-9, atol=1e-13)
        assert ev.cost(r, COSTS) == pytest.approx(PolicyEvaluator(chain, r).rates().cost(COSTS), rel=1e-10)


def _m_matrix(rng: np.random.Generator, n: int, density: float, margin: float) -> np.ndarray:
    """Minus a generator block that loses probability: non-negative off-diagonal rates, each row's outflow
    exceeding its inflow elsewhere by a random share of ``margin`` (tiny margins: nearly singular)."""
    Q = rng.random((n, n)) * (rng.random((n, n)) < density)
    np.fill_diagonal(Q, 0.0)
    loss = margin * rng.random(n)
    loss[rng.integers(n)] = margin  # at least one row loses
    return np.diag(Q.sum(axis=1) + loss) - Q


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 230), st.floats(0.02, 1.0), st.sampled_from([1.0, 1e-3, 1e-8]), st.integers(0, 2**32 - 1))
def test_m_matrix_inverse_by_halves_is_lapacks(n: int, density: float, margin: float, seed: int) -> None:
    """model._matrices.mmatrix_inverse (2 x 2 blocks without pivoting, LAPACK below INVERSE_LEAF states)
    against LAPACK's pivoted inverse, on M-matrices of every size around the leaf and its halvings: the same
    inverse to the accuracy the conditioning allows, non-negative (an M-matrix's inverse is), and the input
    left as it was."""
    from robotctl.model._matrices import mmatrix_inverse

    H = _m_matrix(np.random.default_rng(seed), n, density, margin)
    before = H.copy()
    got = mmatrix_inverse(H)
    want = np.linalg.inv(H)
    np.testing.assert_array_equal(H, before)
    scale = np.abs(want).max()
    cond = np.linalg.cond(H, 1)
    assert np.abs(got - want).max() <= 1e-13 * cond * scale
    assert (got >= -1e-13 * cond * scale).all()


def test_singular_blocks_are_refused() -> None:
    """Both dense routes of the evaluator's level steps raise numpy's LinAlgError on a singular block, which
    the policy search catches (a policy that cannot be solved is skipped and counted)."""
    from robotctl.model._matrices import mmatrix_inverse, small_solve

    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        mmatrix_inverse(np.zeros((3, 3)))
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        small_solve(np.zeros((3, 3)), np.ones((3, 2)))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 48), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_small_solve_is_numpys(n: int, m: int, seed: int) -> None:
    """model._matrices.small_solve (LAPACK's gesv called directly) against np.linalg.solve, C-ordered or not,
    and the inputs left as they were."""
    from robotctl.model._matrices import small_solve

    rng = np.random.default_rng(seed)
    A = _m_matrix(rng, n, 0.5, 1.0)
    B = rng.random((m, n)).T  # a transposed view: not C-ordered
    before = (A.copy(), B.copy())
    np.testing.assert_allclose(small_solve(A, B), np.linalg.solve(A, B), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(A, before[0])
    np.testing.assert_array_equal(B, before[1])


@pytest.mark.parametrize("h", [0, 2])
def test_the_down_block_is_applied_by_its_structure(h: int) -> None:
    """PolicyEvaluator._times_down (X (I_W (x) down(i)) block column by block column, through the inner
    operator, sparse on large levels) against the product with the dense down-block, on every level."""
    rng = np.random.default_rng(3)
    model = random_model(rng, capacity=30, arrival_order=2, obsolescence_order=2, max_batch=2, modes=(1, 2))
    chain = LevelChain(model, h)
    ev = PolicyEvaluator(chain, (1,) * 31)
    kinds = set()
    for i in range(1, 31):
        X = rng.random((chain.dim(i), chain.dim(i)))
        out = np.empty((chain.dim(i), chain.dim(i - 1)))
        ev._times_down(i, X, out)
        np.testing.assert_allclose(out, X @ ev._down_block(i), rtol=1e-13, atol=1e-13)
        kinds.add(sp.issparse(ev._inner_op("down", i)))
    assert kinds == ({False} if h == 0 else {False, True})  # dense inner operators on small levels, sparse on large


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.floats(0.0, 0.5), st.integers(0, 2**32 - 1))
def test_csr_arrays_multiply_as_scipys_matrix(rows: int, cols: int, density: float, seed: int) -> None:
    """model._matrices.csr_arrays (the three CSR arrays by scipy's COO-to-CSR routine, no scipy object) and the
    iterative solver's in-place product through them, against scipy's matrix of the same entries; an entry
    outside the matrix is refused."""
    from robotctl.model._iterative import _Product
    from robotctl.model._matrices import csr_arrays, dense_entries

    rng = np.random.default_rng(seed)
    dense = rng.random((rows, cols)) * (rng.random((rows, cols)) < density)
    r, c, v = dense_entries(dense)
    order = rng.permutation(r.size)  # entries in any order
    raw = csr_arrays(r[order], c[order], v[order], (rows, cols))
    np.testing.assert_array_equal(raw.tocsr().toarray(), dense)
    x, out = rng.random(cols), rng.random(rows)
    want = out + dense @ x
    _Product(raw).add(x, out)
    np.testing.assert_allclose(out, want, rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="outside"):
        csr_arrays(np.array([rows]), np.array([0]), np.array([1.0]), (rows, cols))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 20), st.floats(0.0, 0.6), st.integers(0, 2**32 - 1))
def test_csr_times_dense_adds_scipys_product_into_a_view(p: int, q: int, c: int, density: float, seed: int) -> None:
    """model._matrices.csr_times_dense (scipy's C routine called directly) adds A X into a block of rows of a
    larger array, as scipy's own product does, and leaves the rest of it alone."""
    from robotctl.model._matrices import csr_from_dense, csr_times_dense

    rng = np.random.default_rng(seed)
    A = rng.random((p, q)) * (rng.random((p, q)) < density)
    X = rng.random((q + 3, c))[2:2 + q]  # a block of rows of a larger array
    big = rng.random((p + 4, c))
    want = big.copy()
    want[1:1 + p] += A @ X
    csr_times_dense(csr_from_dense(A), X, big[1:1 + p])
    np.testing.assert_allclose(big, want, rtol=1e-14, atol=1e-14)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 3), st.integers(1, 4),
       st.sampled_from(["exponential", "none"]))
def test_one_phase_operators_are_the_general_routes_bit_for_bit(seed: int, capacity: int, service_order: int,
                                                               max_batch: int, law: str) -> None:
    """With one obsolescence phase (the exponential surrogate's chain, or no obsolescence) A(i), down(i) and
    up(i, a) are formed directly: the same entries, bit for bit, as the Kronecker products and count maps."""
    import dataclasses

    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=capacity, modes=(1, 2), max_batch=max_batch, service_order=service_order,
                         obsolescence_order=1, load=1.0)
    from robotctl.model import PH

    # beta = [1.0] exactly (a random law's may sum to 1 - 1e-16, and then takes the general route)
    model = dataclasses.replace(model, obsolescence=None if law == "none" else PH.exponential(0.2 + rng.random()))
    direct, general = LevelChain(model, 0), LevelChain(model, 0)
    assert direct._single_phase
    general._single_phase = False  # the general route, on the same model
    for i in range(capacity + 1):
        pairs = [(direct.up(i, a), general.up(i, a)) for a in range(1, capacity - i + 1)]
        if i >= 1:
            pairs += [(direct.A(i), general.A(i)), (direct.down(i), general.down(i))]
        for x, y in pairs:
            x = x.toarray() if sp.issparse(x) else x
            y = y.toarray() if sp.issparse(y) else y
            assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)


def test_chains_of_one_law_share_their_count_maps() -> None:
    """A chain given ``counts_of`` reuses the other's count maps (the same objects, read-only), builds the
    same operators as a chain on its own, and refuses a chain of another law; the ladder's depths share."""
    import dataclasses

    from robotctl.model import ThresholdPolicy, fleet_model, solve_approx
    from robotctl.model._matrices import to_dense

    model, _ = fleet_model(6, 14, obsolescence="two-phase")
    first = LevelChain(model, 0)
    cut = dataclasses.replace(model, capacity=10)  # another capacity and depth, the same law
    shared, alone = LevelChain(cut, 2, counts_of=first), LevelChain(cut, 2)
    for i in range(1, 11):
        first.down(i)
    assert shared.counts.expire(4) is first.counts.expire(4)
    assert not shared.counts.expire(4).flags.writeable
    for i in range(1, 11):
        np.testing.assert_array_equal(to_dense(shared.down(i)), to_dense(alone.down(i)))
        for a in range(1, 10 - i + 1):
            np.testing.assert_array_equal(to_dense(shared.up(i, a)), to_dense(alone.up(i, a)))
    other, _ = fleet_model(6, 14, obsolescence="erlang3")
    with pytest.raises(ValueError, match="same obsolescence law"):
        LevelChain(other, 0, counts_of=first)
    built: list[LevelChain] = []
    real = LevelChain.__init__

    def spy(self: LevelChain, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        built.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LevelChain, "__init__", spy)
        big, big_costs = fleet_model(4, 20, obsolescence="two-phase")  # too large for the exact chain
        out = solve_approx(big, ThresholdPolicy.from_thresholds((4, 1), (5,), 20), big_costs, rtol=1e-3)
    solved = [c for c in built if not c.exact and c.counts._maps]
    assert len(out.ladder) >= 3 and len({id(c.counts._maps) for c in solved}) == 1
