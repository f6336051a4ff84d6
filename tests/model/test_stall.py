"""Issue 26: Erlang (defective) obsolescence laws and stalled iterative solves never end in a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import robotctl.model._solve as solve_module
from robotctl.cli import main
from robotctl.model import PH, QueueLengthPolicy, fleet_model, model_to_dict, solve
from robotctl.model._iterative import IterativeResult


def _stall_once(monkeypatch: pytest.MonkeyPatch, residual: float) -> None:
    """The first iterative solve stalls at ``residual``; later ones (the fallback's) run for real."""
    import robotctl.model._iterative as iterative

    real = iterative.stationary_iterative
    calls = [0]

    def stalled(chain, robots_at_level, **kwargs: object) -> IterativeResult:
        calls[0] += 1
        if calls[0] > 1:
            return real(chain, robots_at_level, **kwargs)
        dims = [chain.dim(i) for i in range(chain.K + 1)]
        return IterativeResult(tuple(np.full(d, 1.0 / sum(dims)) for d in dims), 400, residual, False, 1.0)

    monkeypatch.setattr(iterative, "stationary_iterative", stalled)


def _erlang_fleet(K: int, robots: int = 16) -> tuple:
    model, costs = fleet_model(robots, K, obsolescence=PH.erlang(3, 0.3))
    policy = QueueLengthPolicy(tuple(max(1, robots - 2 * i) for i in range(K + 1)))
    return model, costs, policy


def test_iterative_converges_with_erlang_obsolescence() -> None:
    """The level solves of a defective law are factorised: GMRES converges, and agrees with the dense block
    algorithm (an independent route) on every measure."""
    model, _, policy = _erlang_fleet(6)
    it = solve(model, policy, method="iterative")
    block = solve(model, policy, method="block")
    assert it.success and it.method == "iterative", it.message
    assert it.residual < 1e-10
    for name in ("p_loss", "p_obsolete", "p_starvation", "mean_response_served", "mean_sojourn_obsolete"):
        assert getattr(it.measures, name) == pytest.approx(getattr(block.measures, name), rel=1e-8), name


def test_stalled_iterative_falls_back_to_the_approximation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GMRES run that does not converge gives the approximation's answer with its error bar, named as
    such; the bar holds against the exact block solution."""
    model, _, policy = _erlang_fleet(7, robots=4)
    exact = solve(model, policy, method="block")

    _stall_once(monkeypatch, 2.8e3)
    sol = solve(model, policy, method="iterative")
    assert sol.method == "approx" and "stalled at residual 2.8e+03" in sol.message
    assert sol.success and math.isfinite(sol.error_bound) and sol.error_bound >= 0.0
    assert sol.measure_errors
    for name in ("p_loss", "p_obsolete", "mean_response_served"):
        bar = sol.measure_errors[name]
        assert abs(getattr(sol.measures, name) - getattr(exact.measures, name)) <= bar + 1e-9, name


def test_fallback_reports_an_exhausted_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time left the ladder stops early and the result says the budget ran out."""
    model, _, policy = _erlang_fleet(12, robots=4)

    _stall_once(monkeypatch, 1.0)
    monkeypatch.setattr(solve_module, "FALLBACK_SECONDS", 0.0)
    sol = solve(model, policy, method="iterative")
    assert sol.method == "approx"
    assert sol.budget_exhausted and "time budget" in sol.message


def test_cli_solve_erlang3_k8_has_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The case of issue 26: `robotctl solve` on 16 robots, K = 8, Erlang-3 obsolescence (a traceback
    after 72 s before) answers, and the JSON says how."""
    model, costs, policy = _erlang_fleet(8)
    path = tmp_path / "erlang3.yaml"
    path.write_text(yaml.safe_dump({"model": model_to_dict(model),
                                    "costs": {k: getattr(costs, k) for k in
                                              ("loss", "obsolescence", "response", "robot", "starvation")}}))
    code = main(["solve", str(path), "--policy", ",".join(map(str, policy.robots_at_level)), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["message"]
    assert out["method"] in ("iterative", "approx")
    assert {"error_bound", "budget_exhausted", "exact"} <= set(out)
    assert 0.0 < out["measures"]["p_loss"] < 1.0


def test_iterative_with_defective_arrival_phases_agrees_with_the_block_solver() -> None:
    """Erlang-2 interarrival times make D_0 itself defective (level 0's block): it is factorised too."""
    from robotctl.model import BMAP, ModeArrivals, QueueModel

    def erlang_arrivals(rate: float) -> BMAP:
        return BMAP((np.array([[-2 * rate, 2 * rate], [0.0, -2 * rate]]), np.array([[0.0, 0.0], [2 * rate, 0.0]])))

    model = QueueModel(6, ModeArrivals.per_mode({1: erlang_arrivals(0.6), 2: erlang_arrivals(1.2)}),
                       PH.exponential(1.0), PH.erlang(3, 1.5))
    policy = QueueLengthPolicy((2, 2, 2, 1, 1, 1, 1))
    it = solve(model, policy, method="iterative")
    block = solve(model, policy, method="block")
    assert it.success and it.method == "iterative", it.message
    for name in ("p_loss", "p_obsolete", "p_starvation", "mean_response_served"):
        assert getattr(it.measures, name) == pytest.approx(getattr(block.measures, name), rel=1e-8), name
