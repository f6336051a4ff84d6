"""Issue 26: the preallocated value-iteration step is the vectorised Bellman operator, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl.policies import RobotsProblem
from robotctl.policies._mdp import _bellman, _feasible, _Workspace


@pytest.mark.parametrize(("N", "K", "rmin"), [(4, 3, 0), (16, 10, 0), (7, 5, 2)])
def test_workspace_step_equals_the_reference_operator(N: int, K: int, rmin: int) -> None:
    problem = RobotsProblem.paper(N, K, 1.6 / N, 1.0, 1.0)
    mu, nu = problem.service_rate, problem.uniformisation_rate
    lam = np.array(problem.rates)
    ok = _feasible(K, N, rmin)
    rng = np.random.default_rng(N + K)
    cost = rng.uniform(0.0, 3.0, (K + 1, N + 1, 3))
    ws = _Workspace(cost, lam, mu, nu, rmin, ok)
    h = rng.normal(size=(K + 1, N + 1, 3))
    h[~ok] = 0.0
    tau, ref = 0.9, (K, N, 2)
    for _ in range(3):  # three steps: the in-place update feeds the next one
        ws.h[...] = np.moveaxis(h, 2, 0)
        ws.bellman()
        Th, activate, keep = _bellman(h, cost, lam, mu, nu, rmin)
        np.testing.assert_array_equal(np.moveaxis(ws.Th, 0, 2)[ok], Th[ok])
        np.testing.assert_array_equal(ws.activate, activate)
        np.testing.assert_array_equal(ws.keep, keep)
        lo, hi, top = ws.bracket(ref)
        np.testing.assert_array_equal(np.moveaxis(ws.Th, 0, 2)[ok], Th[ok])  # feasible entries untouched
        diff = (Th - h)[ok]
        assert (lo, hi, top) == (diff.min(), diff.max(), np.abs(Th[ok]).max())
        ws.relax(tau, ref)
        h = (1.0 - tau) * h + tau * (Th - Th[ref])
        h[~ok] = 0.0
        np.testing.assert_allclose(np.moveaxis(ws.h, 0, 2), h, rtol=0, atol=1e-12)
