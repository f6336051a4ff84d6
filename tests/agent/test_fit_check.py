"""The refit's model check and uncertainty-aware adoption (robotctl/agent/compute.py, issue 27 steps 2-3):
compute_refit on a burst/quiet trace whose modes a threshold policy set, with that policy in force and its
cost observed on the window (computed here by batch means from the simulation's own slices)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from robotctl.agent.compute import RefitInput, RefitStage, compute_refit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fitting"))
from test_modelcheck import COSTS, POLICY, SERVICE, K, _observed, _trace


def _input(arrivals: str, seconds: float = 6_000.0, seed: int = 2, **kw) -> RefitInput:  # type: ignore[no-untyped-def]
    tr = _trace(seconds, seed)
    obs = _observed(tr)
    kw.setdefault("policy_in_force", POLICY)
    return RefitInput(
        delivery_times=tr.batch_times, pages=tr.batch_sizes, modes=tr.batch_modes, all_modes=(1, 2, 3),
        search_modes=None, service_times=np.random.default_rng(seed).exponential(1 / SERVICE, 2000),
        sizes_bytes=None, capacity=K, costs=COSTS,
        options={"arrivals": arrivals, "batch_resolution_s": 0.0, "censor_above_s": math.inf,
                 "max_service_order": 1},
        window=(0.0, tr.seconds), mode_changes=(tr.epochs, tr.trajectory_modes),
        observed_cost=(obs.cost, *obs.interval), **kw)


def test_the_per_mode_fit_is_flagged_as_a_misfit() -> None:
    """Flagged in the summary; not refused, since its price has no parameter uncertainty."""
    out = compute_refit(_input("per_mode"))
    assert out.success
    check = out.result.fit["check"]
    assert check["status"] == "misfit" and check["message"].startswith("misfit:")
    assert check["recorded_predicted"]["interval"][0] == check["recorded_predicted"]["cost"]


def test_a_joint_fit_that_misprices_the_policy_in_force_is_refused() -> None:
    """The same joint fit, against an observed cost 30% above what was seen: a misfit, refused."""
    inp = _input("joint")
    cost, lo, hi = inp.observed_cost
    import dataclasses

    out = compute_refit(dataclasses.replace(inp, observed_cost=(1.3 * cost, lo + 0.3 * cost, hi + 0.3 * cost)))
    assert not out.success and out.stage is RefitStage.CHECK and out.message.startswith("misfit:")


def test_a_joint_fit_passes_the_check_and_carries_its_cost_interval() -> None:
    out = compute_refit(_input("joint"))
    assert out.success, out.message
    fit = out.result.fit
    assert fit["check"]["status"] in ("ok", "uncertain")
    assert fit["check"]["recorded_observed"]["interval"][0] < fit["check"]["recorded_observed"]["cost"]
    lo, hi = fit["predicted"]["cost_interval"]
    assert lo <= fit["predicted"]["cost"] <= hi and hi > lo
    assert fit["joint"]["phases"] == 2
    assert "decision" in fit and isinstance(fit["decision"]["decisive"], bool)
    if not fit["decision"]["decisive"]:
        assert out.result.policy == POLICY and out.message.startswith("kept the policy in force")
    else:
        assert fit["decision"]["saving_interval"][0] > 0


def test_without_an_observed_cost_the_check_says_uncertain() -> None:
    out = compute_refit(_input("joint", seconds=2_000.0, policy_in_force=None))
    assert out.success and out.result.fit["check"]["status"] == "uncertain"


def test_the_windows_observed_cost_and_its_interval() -> None:
    """A window fed Poisson losses at 0.5/s, 2 robots, and the system empty after about a quarter of the
    losses: J = loss x 0.5 + robot x 2 + starvation x 0.25 lies inside the batch-means interval."""
    from robotctl.agent.queue import ACTIVE, EMPTY, LOST, TIME, Window, window_cost_interval
    from robotctl.model import Costs

    costs = Costs(loss=2.0, robot=1.0, starvation=4.0)
    w = Window(3600.0, buckets=60)
    rng = np.random.default_rng(1)
    t = 0.0
    w.hold(t, TIME, 1.0)
    w.hold(t, ACTIVE, 2.0)
    while t < 3600.0:
        t += float(rng.exponential(2.0))
        w.add(t, LOST, 1.0)
        w.hold(t, EMPTY, 1.0 if rng.uniform() < 0.25 else 0.0)
    got = window_cost_interval(w, t, costs, batches=10)
    assert got is not None
    cost, lo, hi = got
    assert lo < cost < hi
    assert lo < 2.0 * 0.5 + 2.0 + 4.0 * 0.25 < hi
    assert window_cost_interval(Window(3600.0), 1.0, costs) is None


def test_the_check_is_exported_as_a_metric() -> None:
    from prometheus_client import CollectorRegistry

    from robotctl.agent.compute import RefitOutcome
    from robotctl.agent.metrics import AgentMetrics

    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    value = lambda s: registry.get_sample_value("robotctl_fit_check", {"status": s})  # noqa: E731
    assert [value(s) for s in ("ok", "misfit", "uncertain")] == [0.0, 0.0, 0.0]
    metrics.observe_refit(RefitOutcome(False, RefitStage.CHECK, "misfit: ..."), "interval")
    assert [value(s) for s in ("ok", "misfit", "uncertain")] == [0.0, 1.0, 0.0]
    assert registry.get_sample_value("robotctl_refit_failures_total", {"stage": "check"}) == 1.0


def test_a_replay_windows_status_means_something() -> None:
    from robotctl.agent.replay import window_status

    assert window_status({"status": "fallback", "check": {"status": "ok"}}) == "ok"
    assert window_status({"status": "ok", "check": {"status": "misfit"}}) == "misfit"
    assert window_status({"status": "fallback", "check": {"status": "uncertain"}}) == "fallback"
    assert window_status({"status": "ok", "check": {"status": "uncertain"}}) == "uncertain"
    assert window_status({"status": "ok"}) == "uncertain"


def test_drift_under_a_joint_fit_compares_pages_with_the_policys_offered_rate() -> None:
    """Under a threshold policy the mode follows the shared phase: the pages in each mode's time are not the
    joint fit's mode rate times it. With a joint fit the drift check weighs the window's pages against the
    policy's predicted offered rate instead; the per-mode fit keeps the mode-by-mode rates."""
    from types import SimpleNamespace

    from robotctl.agent.queue import mode_pages_key, mode_time_key
    from robotctl.agent.refit_window import drift
    # mode 1 holds in the lulls (0.2 pages/s), mode 3 in the bursts (9 pages/s): 1,000 s each
    totals = {mode_time_key(1): 1000.0, mode_pages_key(1): 200.0,
              mode_time_key(3): 1000.0, mode_pages_key(3): 9000.0}
    from robotctl.model import BMAP

    # the modes' own long-run rates (Poisson: the drift bound is not widened for the fitted bursts)
    arrivals = {m: BMAP.from_matrices([[[-r]], [[r]]]) for m, r in ((1, 1.5), (3, 4.5))}
    offered = 4.6                                                                # the policy's, model-predicted
    measures = SimpleNamespace(arrival_rate=offered)

    def agent(fit: dict) -> SimpleNamespace:
        return SimpleNamespace(
            config=SimpleNamespace(refit=SimpleNamespace(drift_bound=0.5, drift_min_pages=50)),
            policy=SimpleNamespace(model=SimpleNamespace(modes=(1, 3), arrivals=arrivals), fit=fit,
                                   measures=measures),
            drift_window=SimpleNamespace(totals=lambda now: totals))

    assert drift(agent({"joint": {"phases": 2}}), 2000.0) is None                 # 9,200 pages vs 9,200
    assert drift(agent({}), 2000.0) is not None                                  # 9,200 vs 6,000 expected
    totals[mode_pages_key(3)] = 20_000.0
    assert "observed_rate" in (drift(agent({"joint": {"phases": 2}}), 2000.0) or "")


def test_an_adopted_hysteresis_policy_carries_its_own_predicted_cost_and_interval() -> None:
    """robots.hysteresis: auto within a command budget adopts a park/resume policy with resume != park on
    this joint fit; fit["predicted"] is that policy's exact cost under the fitted model (solve_hysteresis
    by an independent brute-force route here), not the plain threshold optimum's, which stays under
    damping.undamped_predicted."""
    import dataclasses

    from robotctl.model import Costs, HysteresisPolicy, cost_of, solve_hysteresis_bruteforce

    costs = Costs(loss=1.0, robot=0.1, starvation=1.0)
    inp = dataclasses.replace(_input("joint", seconds=3_000.0, policy_in_force=None), costs=costs,
                              observed_cost=None, hysteresis=None, dwell_s=None, max_commands_per_robot_min=3.0)
    out = compute_refit(inp)
    assert out.success, out.message
    fit, res = out.result.fit, out.result
    damping = fit["damping"]
    assert damping["method"] == "exact" and damping["resume"] != damping["park"]
    assert res.resume is not None and list(res.resume) == damping["resume"]
    adopted = HysteresisPolicy(tuple(damping["park"]), tuple(damping["resume"]))
    exact = float(cost_of(solve_hysteresis_bruteforce(res.model, adopted).measures, costs).total)
    assert fit["predicted"]["cost"] == pytest.approx(exact, rel=1e-9)
    assert damping["cost"] == pytest.approx(exact, rel=1e-9)
    lo, hi = fit["predicted"]["cost_interval"]
    assert lo <= exact <= hi and hi > lo
    plain = damping["undamped_predicted"]
    assert plain["cost"] == pytest.approx(damping["undamped_cost"], rel=1e-9)
    assert plain["cost"] != pytest.approx(exact, rel=1e-4)
    assert damping["interval_seconds"] > 0
