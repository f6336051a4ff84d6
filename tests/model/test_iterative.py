"""The matrix-free exact route (model._iterative, model._kron) against the dense and brute-force routes."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.agent import load_model_file
from robotctl.model import PH, Admission, ThresholdPolicy, random_model, random_policy, solve, solve_bruteforce
from robotctl.model._kron import KronSum, refine
from robotctl.model._solve import ITERATIVE_ABOVE

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
          "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")
#: two phases with different exit rates: not lumpable, so the chain keeps R = 2
TWO_PHASE = PH(np.array([0.3, 0.7]), np.array([[-0.6, 0.4], [0.1, -0.2]]))


def dense_kron_sum(factors: list[np.ndarray]) -> np.ndarray:
    out = factors[0]
    for f in factors[1:]:
        out = np.kron(out, np.eye(f.shape[0])) + np.kron(np.eye(out.shape[0]), f)
    return out


def test_kron_sum_products_and_inverse() -> None:
    rng = np.random.default_rng(0)
    factors = [rng.uniform(0, 1, (k, k)) - 3 * np.eye(k) for k in (2, 3, 2, 2)]
    A = dense_kron_sum(factors)
    ks = KronSum(factors)
    x = rng.uniform(size=A.shape[0])
    np.testing.assert_allclose(ks.row(x), x @ A, atol=1e-13)
    np.testing.assert_allclose(ks.col(x), A @ x, atol=1e-13)
    np.testing.assert_allclose(ks.solve_row(x) @ A, x, atol=1e-12)
    np.testing.assert_allclose(A @ ks.solve_col(x), x, atol=1e-12)
    assert not ks.perturbed


def test_defective_factor_is_perturbed_and_refined() -> None:
    """An Erlang sub-generator has no eigenvector basis: the inverse is approximate, refinement exact."""
    erlang = np.array([[-2.0, 2.0], [0.0, -2.0]])
    other = np.array([[-1.0, 0.5], [0.2, -0.7]])
    factors = [erlang, erlang, other]
    A = dense_kron_sum(factors)
    ks = KronSum(factors)
    b = np.random.default_rng(1).uniform(size=8)
    ks.solve_col(b)
    assert ks.perturbed
    x, res, _ = refine(ks.col, ks.solve_col, b)
    assert res < 1e-12
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-10)


models = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "capacity": st.integers(1, 6),
    "arrival_order": st.integers(1, 2),
    "service_order": st.integers(1, 2),
    "obsolescence_order": st.sampled_from([None, 1, 2]),
    "max_batch": st.integers(1, 4),
    "modes": st.sampled_from([(1,), (1, 2), (1, 2, 3)]),
    "load": st.floats(0.3, 2.0),
    "admission": st.sampled_from(list(Admission)),
})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models)
def test_iterative_agrees_with_the_brute_force(params: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    policy = random_policy(rng, model.modes, model.capacity)
    it = solve(model, policy, method="iterative", reduce=False)
    brute = solve_bruteforce(model, policy)
    assert it.success and it.method == "iterative" and it.residual < 1e-11
    for name in FIELDS:
        x, y = getattr(it.measures, name), getattr(brute.measures, name)
        assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), f"{name}: {x!r} != {y!r}"
    for a, b in zip(it.level_vectors, brute.level_vectors):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-13)


def test_iterative_agrees_with_the_block_solver_where_levels_are_large() -> None:
    """K = 9 with two-phase obsolescence: 1024 states on the top level."""
    model, _ = load_model_file(str(EXAMPLE))
    model = dataclasses.replace(model, capacity=9, obsolescence=TWO_PHASE)
    policy = ThresholdPolicy.from_thresholds((3, 1), (2,), 9)
    it, block = solve(model, policy, method="iterative"), solve(model, policy, method="block")
    for name in FIELDS:
        assert getattr(it.measures, name) == pytest.approx(getattr(block.measures, name), rel=1e-9)


def test_auto_switches_to_iterative_on_large_levels() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    K = 11
    model = dataclasses.replace(model, capacity=K, obsolescence=TWO_PHASE)
    assert 4 * 2 ** (K - 1) > ITERATIVE_ABOVE
    sol = solve(model, ThresholdPolicy.from_thresholds((3, 1), (2,), K))
    assert sol.method == "iterative" and sol.success and sol.residual < 1e-11
    # the paper's own law lumps to one phase: the reduced chain is small, so auto stays dense
    paper, _ = load_model_file(str(EXAMPLE))
    small = solve(dataclasses.replace(paper, capacity=K), ThresholdPolicy.from_thresholds((3, 1), (2,), K))
    assert small.method == "block" and small.reduction


@pytest.mark.parametrize("h", [0, 1, None])
def test_explicit_level_rows_agree_with_the_kronecker_products(h: int | None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows between levels as explicit sparse matrices (small levels, ``FLAT_DIM``) and as Kronecker-
    structured products give the same vector, and its rates are the dense censored evaluator's."""
    from robotctl.model import LevelChain, PolicyEvaluator, fleet_model
    from robotctl.model import _iterative as iterative

    model, _ = fleet_model(4, 7, obsolescence="two-phase")
    policy = (4, 4, 3, 3, 2, 1, 1, 1)
    flat = iterative.stationary_iterative(LevelChain(model, h), policy)
    monkeypatch.setattr(iterative, "FLAT_DIM", 0)
    chain = LevelChain(model, h)
    structured = iterative.stationary_iterative(chain, policy)
    assert flat.converged and structured.converged
    for a, b in zip(flat.level_vectors, structured.level_vectors):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-15)
    y = iterative.rates_from_levels(chain, policy, flat.level_vectors)
    dense = PolicyEvaluator(chain, policy, levels=True).rates()
    np.testing.assert_allclose(y[:len(dense.values)], dense.values, rtol=1e-10)


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("fast", [True, False])
def test_the_in_place_sparse_product_is_the_public_one(fast: bool, raw: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """_Product (scipy's private csr_matvec when it is there, the public product otherwise) adds A x into a
    view of a longer vector, as out += A @ x would, for a scipy matrix and for its three arrays (CSRArrays);
    both routes, so a scipy that moves or changes the private routine fails here rather than in a solve."""
    import scipy.sparse as sp

    from robotctl.model import _iterative
    from robotctl.model._matrices import CSRArrays

    if not fast:
        monkeypatch.setattr(_iterative, "_csr_matvec", None)
    elif _iterative._csr_matvec is None:
        pytest.skip("this scipy has no csr_matvec: the public product is the only route")
    rng = np.random.default_rng(3)
    A = sp.random(7, 5, density=0.4, format="csr", random_state=4)
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    operand = CSRArrays(A.shape, A.indptr, A.indices, A.data) if raw else A
    x = rng.random(5)
    whole = rng.random(12)
    expected = whole.copy()
    expected[3:10] += A.toarray() @ x
    _iterative._Product(operand).add(x, whole[3:10])
    assert np.allclose(whole, expected, rtol=1e-14, atol=1e-14)
    strided = rng.random(14)  # a view that is not contiguous: the public product
    expected = strided.copy()
    expected[::2] += A.toarray() @ x
    _iterative._Product(operand).add(x, strided[::2])
    assert np.allclose(strided, expected, rtol=1e-14, atol=1e-14)
