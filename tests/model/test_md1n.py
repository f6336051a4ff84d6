"""Paper 004's M/D/1/N with renovation: the conservation identity to 1e-12 on both loss routes, the
reduction to M/D/1/(N+1) without renovation (against the classical M/G/1/K relation), the printed
typos shown to break the chain or conservation, the same route with PH service against the CTMC core,
and simulation with constant service times."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from robotctl.model import (
    BMAP,
    PH,
    BufferPolicy,
    Conflict,
    Deterministic,
    InputError,
    ModeArrivals,
    QueueModel,
    Renovation,
    ThresholdPolicy,
    _md1n,
    random_ph,
    simulate_buffer,
    solve_buffer,
    solve_md1n,
)
from robotctl.model._md1n import ArrivalCounts, arrival_kernel, renovation_kernel, transition_matrix_closed_form

cases = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "places": st.integers(1, 9),
    "rate": st.floats(0.05, 4.0),
    "d": st.floats(0.1, 3.0),
    "option": st.sampled_from(list(Conflict)),
    "zeros": st.booleans(),
})


def renovation_for(rng: np.random.Generator, places: int, option: Conflict, zeros: bool) -> Renovation:
    q = rng.dirichlet(np.ones(int(rng.integers(1, places + 2))))
    if zeros:
        q = np.where(rng.random(q.size) < 0.4, 0.0, q)
        q = q / q.sum() if q.sum() > 0 else np.eye(1, q.size)[0]
    return Renovation(tuple(q), option)


@settings(max_examples=150, deadline=None)
@given(cases)
def test_conservation_holds_on_both_routes(case: dict) -> None:
    """loss = blocking + renovation and the tagged-customer formula (eq. (6), corrected eq. (12)) both
    equal 1 - 1 / (lambda f*) to 1e-12."""
    rng = np.random.default_rng(case["seed"])
    ren = renovation_for(rng, case["places"], case["option"], case["zeros"])
    s = solve_md1n(case["rate"], case["d"], case["places"], ren)
    assert s.success, s.message
    assert abs(s.loss_probability - s.loss_conservation) <= 1e-12
    assert abs(s.loss_tagged - s.loss_conservation) <= 1e-12
    assert s.conservation_residual <= 1e-12
    assert sum(s.distribution) == pytest.approx(1.0, abs=1e-13)
    assert min(s.distribution) >= 0.0


@settings(max_examples=60, deadline=None)
@given(cases)
def test_generic_kernel_equals_the_written_out_entries(case: dict) -> None:
    """P = K_A R (the generic kernel) against the entry-by-entry formulas of Sections 2.1 and 3.1
    (Option 2's rows i >= 3 corrected)."""
    rng = np.random.default_rng(case["seed"])
    ren = renovation_for(rng, case["places"], case["option"], case["zeros"])
    counts = ArrivalCounts.deterministic(case["rate"], case["d"], case["places"] + 2)
    generic = arrival_kernel(counts, case["places"]) @ renovation_kernel(ren, case["places"])
    np.testing.assert_allclose(transition_matrix_closed_form(counts, case["places"], ren), generic, atol=1e-14)
    np.testing.assert_allclose(generic.sum(axis=1), 1.0, atol=1e-13)


def printed_option2_row(counts: ArrivalCounts, N: int, ren: Renovation, i: int) -> np.ndarray:
    """Section 3.1's p_ij for 2 <= i <= N exactly as printed."""
    q = np.zeros(N + 2)
    q[:len(ren.q)] = ren.q
    b, B = counts.pmf, counts.tail
    row = np.zeros(N + 1)
    for j in range(1, N + 1):
        tail = sum(b[k] * q[k - j + 1] for k in range(j - 1, N)) + B[N - 1] * q[N - j]
        if j <= i - 2:
            row[j] = tail
        elif j <= N - 1:
            row[j] = b[j - i + 1] * ren.tail(j) + tail
        else:
            row[j] = (q[0] + q[N]) * B[N - i]
    return row


def test_printed_option2_rows_from_three_on_are_not_stochastic() -> None:
    N, ren = 5, Renovation((0.3, 0.25, 0.2, 0.15, 0.1), Conflict.SKIP)
    counts = ArrivalCounts.deterministic(1.2, 1.0, N + 2)
    right = transition_matrix_closed_form(counts, N, ren)
    np.testing.assert_allclose(printed_option2_row(counts, N, ren, 2), right[2], atol=1e-15)  # row 2 is right
    for i in range(3, N + 1):
        printed = printed_option2_row(counts, N, ren, i)
        assert abs(printed.sum() - 1.0) > 1e-3, i


def test_printed_eq13_breaks_conservation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eq. (13) as printed weighs the j arrivals by the elapsed time x instead of the remaining d - x."""
    def printed(lam: float, counts: ArrivalCounts, boundary: np.ndarray, i: int, j: int) -> float:
        d = counts.mean_service

        def p_i(x: float) -> float:
            return math.exp(-lam * x) * sum(boundary[i - k - 1] * (lam * x) ** k / math.factorial(k) for k in range(i))

        return quad(lambda x: p_i(x) * (lam * x) ** j / math.factorial(j) * math.exp(-lam * x), 0.0, d)[0]

    ren = Renovation((0.3, 0.25, 0.2, 0.15, 0.1), Conflict.SKIP)
    assert solve_md1n(1.2, 1.0, 5, ren).conservation_residual < 1e-12
    monkeypatch.setattr(_md1n, "_gamma", printed)
    assert solve_md1n(1.2, 1.0, 5, ren).conservation_residual > 1e-3


def test_printed_eq15_breaks_conservation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eq. (15) as printed multiplies Q_{j+m+1} by r_{j,j-1} instead of r_{m,j-1}."""
    def printed(counts: ArrivalCounts, N: int, q: np.ndarray, Q: np.ndarray) -> np.ndarray:
        b = counts.pmf
        r2 = np.zeros((N, N))
        for j in range(N):
            for bh in range(N - j):
                cap = N - 1 - bh - j
                law = [(0, 1.0)] if cap == 0 else [(a, b[a]) for a in range(cap)] + [(cap, counts.tail[cap - 1])]
                total = 0.0
                for a, pa in law:
                    m = bh + a
                    if j == 0:
                        v = q[1:m + 1].sum()
                    else:
                        v = (sum(q[k] * r2[m, j - 1 - k] for k in range(j)) + q[j + 1:j + m + 1].sum()
                             + Q[j + m + 1] * r2[j, j - 1])
                    total += pa * v
                r2[bh, j] = total
        return r2

    ren = Renovation((0.3, 0.25, 0.2, 0.15, 0.1), Conflict.SKIP)
    monkeypatch.setattr(_md1n, "_option2_r", printed)
    assert solve_md1n(1.2, 1.0, 5, ren).conservation_residual > 1e-3


def test_printed_eq6_double_counts_when_n_is_one() -> None:
    """For N = 1 eq. (6) as printed keeps the Q_1 term although nobody can queue behind the customer."""
    ren = Renovation((0.4, 0.6), Conflict.KEEP_ONE)
    s = solve_md1n(1.5, 1.0, 1, ren)
    beta1 = ArrivalCounts.deterministic(1.5, 1.0, 3).pmf[1]
    printed = s.distribution[2] + ren.tail(1) * (s.distribution[1] - s.boundary[0] * beta1 / 1.5)
    assert s.loss_tagged == pytest.approx(s.loss_conservation, abs=1e-14)
    assert abs(printed - s.loss_conservation) > 1e-2


def mg1k_classical(lam: float, counts: ArrivalCounts, K: int) -> np.ndarray:
    """M/G/1/K without renovation by the classical route (Gross and Harris, Section 5.1.9): the departure
    chain's probabilities on 0..K-1 are proportional to the infinite queue's (recursion on a_k), and
    p_n = pi_n / (pi_0 + rho), p_K = 1 - 1 / (pi_0 + rho)."""
    a = counts.pmf
    x = np.zeros(K)
    x[0] = 1.0
    for j in range(K - 1):
        x[j + 1] = (x[j] - x[0] * a[j] - sum(x[k] * a[j - k + 1] for k in range(1, j + 1))) / a[0]
    pi = x / x.sum()
    rho = lam * counts.mean_service
    return np.append(pi / (pi[0] + rho), 1.0 - 1.0 / (pi[0] + rho))


@pytest.mark.parametrize(("lam", "d", "N"), [(0.5, 1.0, 3), (1.0, 1.0, 4), (1.7, 0.9, 6), (3.0, 1.0, 2)])
@pytest.mark.parametrize("option", list(Conflict))
def test_q0_one_is_md1_with_n_plus_one_places(lam: float, d: float, N: int, option: Conflict) -> None:
    s = solve_md1n(lam, d, N, Renovation((1.0,) + (0.0,) * N, option))
    assert s.renovation_probability == 0.0
    assert s.loss_probability == pytest.approx(s.distribution[N + 1], abs=1e-15)
    assert s.loss_probability == pytest.approx(s.loss_conservation, abs=1e-12)
    classical = mg1k_classical(lam, ArrivalCounts.deterministic(lam, d, N + 2), N + 1)
    np.testing.assert_allclose(s.distribution, classical, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("N", [1, 2, 5, 8])
def test_time_at_the_top_two_ways(N: int) -> None:
    """f_{i,N+1} as used, (1/lambda) sum_{k >= N+1-i} B_k, against the paper's two ways: its closed form
    d B_{N-i} - ((N+1-i)/lambda) B_{N+1-i} and d - sum_{n<=N} f_{in}."""
    lam, d = 1.3, 0.8
    counts = ArrivalCounts.deterministic(lam, d, N + 2)
    B = counts.tail
    for i in range(1, N + 1):
        used = counts.excess[N + 1 - i] / lam
        closed = d * B[N - i] - (N + 1 - i) / lam * B[N + 1 - i]
        by_difference = d - sum(B[n - i] / lam for n in range(i, N + 1))
        assert used == pytest.approx(closed, abs=1e-14)
        assert used == pytest.approx(by_difference, abs=1e-14)


def test_boundary_densities_are_service_start_rates() -> None:
    """Eq. (5)'s p_n(0) equal (P_n^+ + [n = 1] P_0^+) / f*, the rate of service starts with n customers."""
    for option in Conflict:
        s = solve_md1n(1.4, 1.0, 6, Renovation((0.5, 0.2, 0.1, 0.1, 0.05, 0.05), option))
        rates = [(s.embedded[n] + (s.embedded[0] if n == 1 else 0.0)) / s.f_star for n in range(1, 7)]
        np.testing.assert_allclose(s.boundary, rates, rtol=1e-12)


@pytest.mark.parametrize("option", list(Conflict))
@pytest.mark.parametrize("N", [1, 3, 6])
def test_phase_type_service_equals_the_ctmc(option: Conflict, N: int) -> None:
    """The same embedded-chain code with PH service (A mixed Poisson) against the CTMC of the core
    (levels, stationary law by sparse LU): two routes that share nothing but the model."""
    rng = np.random.default_rng(100 * N + int(option))
    lam = 1.1
    service = random_ph(rng, 2, mean=0.9)
    ren = Renovation(tuple(rng.dirichlet(np.ones(N + 1))), option)
    s = solve_md1n(lam, service, N, ren)
    model = QueueModel(N + 1, ModeArrivals.per_mode({1: BMAP((np.array([[-lam]]), np.array([[lam]])))}), service)
    ctmc = solve_buffer(model, ThresholdPolicy.static(1, N + 1), BufferPolicy(renovation=ren)).measures
    np.testing.assert_allclose(s.distribution, ctmc.queue_length_distribution, atol=1e-13)
    assert s.blocking_probability == pytest.approx(ctmc.p_blocked, abs=1e-13)
    assert s.renovation_probability == pytest.approx(ctmc.p_renovated, abs=1e-13)
    assert s.second_moment == pytest.approx(ctmc.second_moment_queue_length, rel=1e-12)
    assert math.isnan(s.loss_tagged) and s.conservation_residual < 1e-12


def poisson_model(lam: float, places: int) -> QueueModel:
    return QueueModel(places + 1, ModeArrivals.per_mode({1: BMAP((np.array([[-lam]]), np.array([[lam]])))}),
                      PH.exponential(1.0))


@pytest.mark.parametrize(("lam", "d", "q", "option", "seed"), [
    (1.1, 1.0, (0.5, 0.2, 0.2, 0.1), Conflict.KEEP_ONE, 31),
    (1.1, 1.0, (0.5, 0.2, 0.2, 0.1), Conflict.SKIP, 32),
    (0.7, 1.2, (0.6, 0.0, 0.3, 0.0, 0.0, 0.1), Conflict.KEEP_ONE, 33),
    (2.0, 0.8, (0.2, 0.3, 0.1, 0.1, 0.1, 0.2), Conflict.SKIP, 34),
])
def test_simulation_with_constant_service(lam: float, d: float, q: tuple[float, ...], option: Conflict,
                                          seed: int) -> None:
    """Loss, its split, the moments and P_0..P_{N+1} inside the simulated 99% family-wise intervals."""
    N = 5
    s = solve_md1n(lam, d, N, Renovation(q, option))
    policy = ThresholdPolicy.static(1, N + 1)
    sim = simulate_buffer(poisson_model(lam, N), policy, BufferPolicy(renovation=s.renovation),
                          np.random.default_rng(seed), events=300_000, service=Deterministic(d))
    exact = {"p_loss": s.loss_probability, "p_blocked": s.blocking_probability,
             "p_renovated": s.renovation_probability, "mean_queue_length": s.mean_in_system,
             "second_moment_queue_length": s.second_moment, **{f"P_{i}": p for i, p in enumerate(s.distribution)}}
    comparison = sim.check(exact, familywise=True)
    assert comparison.all_inside, str(comparison)


def test_simulation_tells_constant_from_exponential_service() -> None:
    """Teeth: the M/D/1/N values lie outside intervals simulated with exponential service of the same mean."""
    N, lam, d = 5, 1.1, 1.0
    ren = Renovation((0.5, 0.2, 0.2, 0.1), Conflict.KEEP_ONE)
    s = solve_md1n(lam, d, N, ren)
    sim = simulate_buffer(poisson_model(lam, N), ThresholdPolicy.static(1, N + 1), BufferPolicy(renovation=ren),
                          np.random.default_rng(35), events=300_000, service=PH.exponential(1.0 / d))
    exact = {"mean_queue_length": s.mean_in_system, "P_0": s.distribution[0], "p_blocked": s.blocking_probability}
    assert len(sim.check(exact, familywise=True).outside) >= 2


def test_input_errors() -> None:
    ren = Renovation((0.5, 0.5))
    with pytest.raises(InputError, match=r"^arrival_rate"):
        solve_md1n(0.0, 1.0, 3, ren)
    with pytest.raises(InputError, match=r"^service_time"):
        solve_md1n(1.0, -1.0, 3, ren)
    with pytest.raises(InputError, match=r"^places"):
        solve_md1n(1.0, 1.0, 0, ren)
    with pytest.raises(InputError, match=r"^q: has 4 entries but 2 waiting places"):
        solve_md1n(1.0, 1.0, 2, Renovation((0.25, 0.25, 0.25, 0.25)))


def test_json_contract() -> None:
    s = solve_md1n(0.9, 1.0, 4, Renovation((0.5, 0.3, 0.2), Conflict.SKIP)).to_dict()
    assert {"loss_probability", "blocking_probability", "renovation_probability", "mean_in_system", "second_moment",
            "distribution"} <= set(s)
    assert len(s["distribution"]) == 6  # type: ignore[arg-type]
