"""The refit: a failing fit or solve keeps the last good policy (and says so on /metrics and in the log),
timeouts, the schedule and drift, the process executor, and the arrival adjustments."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import pickle
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent import load_model_file
from robotctl.agent.api import Completion, Delivery
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.core import Agent
from robotctl.agent.refit import RefitInput, RefitOutcome, RefitStage, cancel_and_wait, compute_refit
from robotctl.fitting import adjust_arrivals, fit_model
from robotctl.model import InputError, Simulation, ThresholdPolicy, TraceKind

ROOT = Path(__file__).resolve().parents[2]
TRUE_MODEL, COSTS = load_model_file(str(ROOT / "config" / "paper-example.yaml"))


def _config(tmp_path: Path, fit: dict[str, Any] | None = None, **refit: Any) -> AgentConfig:
    return AgentConfig.from_dict({
        "server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 5},
        "robots": {"count": 4, "allow_unregistered": True},
        "costs": COSTS.to_dict(), "policy": {"startup": [4, 4, 3, 2, 1, 1]},
        "refit": {"interval_s": 1e9, "min_interval_s": 0, "window_s": 1e5, "drift_window_s": 600,
                  "min_deliveries": 100, "executor": "thread", "cold_start_deliveries": 0, **refit},
        "fit": fit or {"mean_useful_life_s": 5.0},
        "log": {"dir": str(tmp_path / "log")},
    })


def feed(agent: Agent, clock: ManualClock, seconds: float, seed: int) -> int:
    """Play the paper example's traffic into the agent (core calls, no HTTP), the simulator following the
    agent's policy; returns the number of deliveries."""
    def controller(n: int, active: int, t: float) -> int:
        return agent.holder.current.policy.robots_at_level[n]

    sim = Simulation(TRUE_MODEL, controller, np.random.default_rng(seed), record=True)
    start = clock.now()
    sim.advance(t_end=seconds)
    n = 0
    for row in sim.take_rows():
        clock.set(start + row.t)
        if row.kind is TraceKind.DELIVERY:
            agent.deliver([Delivery(f"robot-{row.robot}", row.pages, None, None)])
            n += 1
        elif row.kind is TraceKind.COMPLETION:
            agent.complete([Completion(1, row.service_s, None)])
        elif row.kind is TraceKind.OBSOLETE:
            agent.obsolete(1)
    clock.set(start + seconds)
    return n


def _failing_optimise(model: Any, costs: Any, *, modes: Any = None) -> Any:
    raise np.linalg.LinAlgError("singular matrix (injected)")


def _metric(text: str, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and s.labels == labels:
                return s.value
    raise KeyError(name)


async def test_failing_solve_keeps_the_last_good_policy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(0.0)
    failing = {"on": False}

    def compute(inp: RefitInput) -> RefitOutcome:
        if not failing["on"]:
            return compute_refit(inp)
        return compute_refit(inp, optimise_fn=_failing_optimise)

    async with run_in_process(_config(tmp_path), clock=clock, compute=compute) as (url, app), \
            aiohttp.ClientSession() as s:
        agent = app[AGENT]
        feed(agent, clock, 2000.0, seed=5)
        async with s.post(url + "/v1/refit") as r:
            first = await r.json()
        assert first["adopted"], first["message"]
        good = agent.holder.current
        assert good.source == "fit" and good.measures is not None
        feed(agent, clock, 500.0, seed=6)
        await ManualClock.settle()
        while app[REFIT].record.running:  # a scheduled refit the feed may have started
            await asyncio.sleep(0.01)
        good = agent.holder.current
        adopted = app[REFIT].record.adopted
        failing["on"] = True
        with caplog.at_level(logging.WARNING, logger="robotctl.agent.refit"):
            async with s.post(url + "/v1/refit") as r:
                second = await r.json()
        assert not second["adopted"] and second["stage"] == "solve"
        assert "singular matrix (injected)" in second["message"]
        assert agent.holder.current is good  # the same snapshot object: nothing was swapped
        q = agent.queue.length  # in force: r(q), or with an exact hysteresis policy between resume(q) and r(q)
        low = good.basis.resume[q] if good.basis.resume is not None else good.policy.robots_at_level[q]
        assert low <= agent.actuator.mode <= good.policy.robots_at_level[q]
        assert any("refit_failed" in rec.message and "stage=solve" in rec.message for rec in caplog.records)
        async with s.get(url + "/metrics") as r:
            text = await r.text()
        assert _metric(text, "robotctl_refit_failures_total", stage="solve") == 1
        assert _metric(text, "robotctl_refits_total", outcome="adopted") == adopted
        assert _metric(text, "robotctl_refit_last_success") == 0
        assert _metric(text, "robotctl_policy_version") == good.version
        assert good.measures is not None and good.cost is not None
        assert _metric(text, "robotctl_loss_ratio", source="predicted") == good.measures.p_loss
        assert _metric(text, "robotctl_cost", source="predicted") == good.cost.total
        for level, r in enumerate(good.policy.robots_at_level):
            assert _metric(text, "robotctl_policy_robots_at_level", level=str(level)) == r
        async with s.get(url + "/v1/status") as r:
            status = await r.json()
        assert status["refit"]["last_stage"] == "solve" and status["refit"]["failures"] == {"solve": 1}


async def test_failing_fit_and_too_little_data_keep_the_startup_policy(tmp_path: Path) -> None:
    clock = ManualClock(0.0)

    def broken_fit(*args: Any, **kwargs: Any) -> Any:
        raise InputError("delivery_times", "are all equal (injected)", "collect more")

    compute = functools.partial(compute_refit, fit_fn=broken_fit)
    cfg = _config(tmp_path, min_deliveries=50, min_interval_s=1e9)  # no refit but the ones asked for here
    async with run_in_process(cfg, clock=clock, compute=compute) as (_, app):
        agent = app[AGENT]
        start = agent.holder.current
        outcome = await app[REFIT].refit("test")
        assert outcome.stage is RefitStage.INPUT and "refit.min_deliveries = 50" in outcome.message
        feed(agent, clock, 300.0, seed=1)
        outcome = await app[REFIT].refit("test")
        assert outcome.stage is RefitStage.FIT and "all equal (injected)" in outcome.message
        assert agent.holder.current is start and start.source == "startup"
        assert app[REFIT].record.failures == {"input": 1, "fit": 1}


async def test_the_joint_estimate_warm_starts_the_next_refit(tmp_path: Path) -> None:
    seen: list[Any] = []

    def recording(inp: RefitInput) -> RefitOutcome:
        seen.append(inp.joint_init)
        return compute_refit(inp)

    clock = ManualClock(0.0)
    cfg = _config(tmp_path, fit={"mean_useful_life_s": 5.0, "options": {"arrivals": "joint"}})
    async with run_in_process(cfg, clock=clock, compute=recording) as (_, app):
        feed(app[AGENT], clock, 600.0, seed=4)
        first = await app[REFIT].refit("test")
        assert first.joint_params is not None, first.message
        feed(app[AGENT], clock, 100.0, seed=5)
        second = await app[REFIT].refit("test")
    assert seen[0] is None and seen[1] is first.joint_params
    assert pickle.loads(pickle.dumps(first.joint_params)).phases == first.joint_params.phases   # crosses to a worker
    assert second.joint_params is not None and second.joint_params.phases == first.joint_params.phases
    assert first.result is not None and second.result is not None and "joint" in second.result.fit


async def test_a_refit_over_its_timeout_is_abandoned(tmp_path: Path) -> None:
    def slow(inp: RefitInput) -> RefitOutcome:
        time.sleep(0.5)
        return RefitOutcome(False, RefitStage.FIT, "too late")

    clock = ManualClock(0.0)
    async with run_in_process(_config(tmp_path, timeout_s=0.05), clock=clock, compute=slow) as (_, app):
        feed(app[AGENT], clock, 300.0, seed=2)
        outcome = await app[REFIT].refit("test")
        assert outcome.stage is RefitStage.TIMEOUT and "refit.timeout_s = 0.05" in outcome.message
        assert app[AGENT].holder.current.source == "startup"


async def test_refit_in_a_worker_process(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    async with run_in_process(_config(tmp_path, executor="process"), clock=clock) as (_, app):
        feed(app[AGENT], clock, 1500.0, seed=3)
        outcome = await app[REFIT].refit("test")
        assert outcome.success, outcome.message
        assert app[AGENT].holder.current.policy == outcome.policy


async def test_schedule_first_fit_interval_and_drift(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    cfg = _config(tmp_path, interval_s=1000.0, min_interval_s=100.0, drift_bound=0.5, drift_window_s=200.0,
                  drift_min_pages=20)
    async with run_in_process(cfg, clock=clock) as (_, app):
        agent, loop = app[AGENT], app[REFIT]
        assert loop.due(clock.now()) is None  # no data yet
        feed(agent, clock, 400.0, seed=4)
        assert loop.due(clock.now()) == "first_fit"
        outcome = await loop.refit("first_fit")
        assert outcome.success, outcome.message
        assert loop.due(clock.now() + 50.0) is None  # within min_interval_s
        assert loop.due(clock.now() + 1000.0) == "interval"
        # the traffic doubles: the observed rate of the mode in force leaves the fitted one
        snap = agent.holder.current
        assert snap.model is not None
        mode = agent.actuator.mode
        rate = snap.model.arrivals[mode].rate
        t = clock.now()
        for k in range(int(4 * rate * 150)):
            clock.set(t + k / (4 * rate))
            agent.deliver([Delivery(None, 1, None, None)])
            agent.complete([Completion(1, 0.1, None)])
        reason = loop.due(clock.now())
        assert reason is not None and reason.startswith("drift mode"), reason  # mode=m or modes=...


def _trace(policy: ThresholdPolicy, seconds: float, seed: int) -> dict[str, Any]:
    sim = Simulation(TRUE_MODEL, policy, np.random.default_rng(seed), record=True)
    sim.advance(t_end=seconds)
    rows = sim.take_rows()
    d = [r for r in rows if r.kind is TraceKind.DELIVERY]
    layout = sim.layout
    mode_time = sim.totals()[layout.mode_time:]
    return {"t": np.array([r.t for r in d]), "pages": np.array([r.pages for r in d], dtype=np.int64),
            "modes": np.array([r.active for r in d], dtype=np.int64),
            "service": np.array([r.service_s for r in rows if r.kind is TraceKind.COMPLETION]),
            "exposure": {m: float(mode_time[m]) for m in TRUE_MODEL.modes}}


def _input(tr: dict[str, Any], **kw: Any) -> RefitInput:
    return RefitInput(delivery_times=tr["t"], pages=tr["pages"], modes=tr["modes"], all_modes=(1, 2, 3, 4),
                      search_modes=None, service_times=tr["service"], sizes_bytes=None, capacity=5, costs=COSTS,
                      mean_useful_life_s=5.0, mode_exposure_s=tr["exposure"], **kw)


def test_observed_modes_take_their_exposure_rate_and_others_are_remembered() -> None:
    tr = _trace(ThresholdPolicy((3, 3, 3, 1, 1, 1)), 4000.0, seed=11)
    exact = {m: tr["pages"][tr["modes"] == m].sum() / tr["exposure"][m] for m in (1, 3)}
    out = compute_refit(_input(tr))  # the agent hands fit_model the exact time in each mode
    assert out.success and out.model is not None
    for m in (1, 3):
        assert out.model.arrivals[m].rate == pytest.approx(exact[m], rel=1e-9)
    plain = compute_refit(_input(tr, rate_from_exposure=False))
    assert plain.model is not None and plain.model.arrivals[1].rate > 2 * exact[1]  # what the exposure fixes
    # modes the window does not observe: the linear rule from the (rescaled) nearest mode, or the memory
    fit = fit_model(tr["t"], pages=tr["pages"], modes=tr["modes"], all_modes=(1, 2, 3, 4),
                    service_times=tr["service"], mean_useful_life_s=5.0, capacity=5,
                    mode_exposure_s=tr["exposure"])
    adjusted = adjust_arrivals(fit, _input(tr).remembered)
    arrivals, sources = adjusted.arrivals, adjusted.sources
    assert sources == {1: "observed", 2: "linear", 3: "observed", 4: "linear"}
    base = fit.modes[1].base_mode
    assert base is not None
    assert arrivals[2].rate == pytest.approx(exact[base] * 2 / base, rel=1e-9)
    remembered = {2: TRUE_MODEL.arrivals[2], 4: TRUE_MODEL.arrivals[4]}
    adjusted = adjust_arrivals(fit, _input(tr, remembered=remembered).remembered)
    arrivals, sources = adjusted.arrivals, adjusted.sources
    assert sources == {1: "observed", 2: "remembered", 3: "observed", 4: "remembered"}
    assert arrivals[4].allclose(TRUE_MODEL.arrivals[4])


def test_compute_refit_reports_without_raising() -> None:
    tr = _trace(ThresholdPolicy((4, 4, 4, 4, 4, 4)), 300.0, seed=12)
    out = compute_refit(_input(tr))
    assert out.success and out.policy is not None and out.stage is RefitStage.DONE
    assert set(out.fit["modes"]) == {"1", "2", "3", "4"}
    assert out.fit["modes"]["4"]["source"] == "observed" and out.fit["rungs"]
    bad = compute_refit(_input(tr, options={"no_such_option": 1}))
    assert not bad.success and bad.stage is RefitStage.FIT and "no_such_option" in bad.message


async def test_probe_runs_each_mode_then_fits(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    cfg = _config(tmp_path, probe_s=100.0)
    async with run_in_process(cfg, clock=clock) as (_, app):
        agent, loop = app[AGENT], app[REFIT]
        seen = []
        for _step in range(4):
            await ManualClock.settle()
            assert agent.holder.current.source == "probe" and loop.probing
            seen.append(agent.actuator.mode)
            feed(agent, clock, 100.0, seed=20 + _step)
        await ManualClock.settle()
        while loop.record.running:
            await asyncio.sleep(0.01)
        assert seen == [4, 3, 2, 1]
        assert loop.record.last_reason == "probe_done"
        assert agent.holder.current.source == "fit", loop.record.last_message


def _dying_pool() -> Any:
    import concurrent.futures
    import multiprocessing
    import os

    return concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=os._exit, initargs=(3,))


async def test_a_worker_process_that_cannot_start_falls_back_to_a_thread(tmp_path: Path, monkeypatch: Any,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    import robotctl.agent.worker as worker_module

    monkeypatch.setattr(worker_module, "_spawn_pool", _dying_pool)
    clock = ManualClock(0.0)
    with caplog.at_level(logging.WARNING, logger="robotctl.agent.refit"):
        async with run_in_process(_config(tmp_path, executor="process", min_interval_s=1e9), clock=clock) as (_, app):
            for _ in range(500):  # the warm-up runs in the background
                if app[REFIT].executor_kind == "thread":
                    break
                await asyncio.sleep(0.01)
            assert app[REFIT].executor_kind == "thread"
            feed(app[AGENT], clock, 1500.0, seed=3)
            outcome = await app[REFIT].refit("test")
            assert outcome.success, outcome.message
    assert any("refit_worker_process_failed" in r.message for r in caplog.records)


async def test_auto_executor_is_a_thread_in_process(tmp_path: Path) -> None:
    cfg = _config(tmp_path, executor="auto")
    async with run_in_process(cfg, clock=ManualClock(0.0)) as (_, app):
        assert app[REFIT].executor_kind == "thread"


async def test_cancel_and_wait_ends_a_task_that_absorbs_one_cancellation() -> None:
    """On Python 3.11 asyncio.wait_for can swallow a cancellation that lands as its result arrives;
    the agent's shutdown must still end its background tasks."""

    async def stubborn() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # absorbed, as wait_for did
            await asyncio.sleep(30)
        await asyncio.sleep(30)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), timeout=10)
    assert task.cancelled()


def test_targets_choose_the_least_robot_time_that_meets_them_on_the_fitted_model() -> None:
    """targets: in the configuration: the refit adopts the policy of least robot time that meets the bounds
    on the fitted model (checked by solving every policy of that model), or the closest one, saying so."""
    from robotctl.model import solve
    from robotctl.policies import Targets, every_policy

    tr = _trace(ThresholdPolicy((4, 4, 3, 2, 1, 1)), 2000.0, seed=13)
    targets = Targets(max_loss=0.3, max_starvation=0.1)
    out = compute_refit(_input(tr, targets=targets))
    assert out.success and out.model is not None and out.policy is not None
    assert out.fit["targets"]["met"] == {"max_loss": True, "max_starvation": True}
    measures = {p.robots_at_level: solve(out.model, p).measures for p in every_policy((1, 2, 3, 4), 5)}
    ok = {r: m.mean_active_robots for r, m in measures.items() if m.p_loss <= 0.3 and m.p_starvation <= 0.1}
    assert measures[out.policy.robots_at_level].mean_active_robots == pytest.approx(min(ok.values()), rel=1e-12)
    weights = compute_refit(_input(tr))
    assert weights.policy is not None and "targets" not in weights.fit
    impossible = compute_refit(_input(tr, targets=Targets(max_loss=1e-6)))
    assert impossible.success and impossible.message.startswith("adopted, targets not met: infeasible")
    assert impossible.fit["targets"] == {"met": {"max_loss": False}, "status": "infeasible",
                                         "message": impossible.message.removeprefix("adopted, targets not met: ")}


def test_exact_damping_keeps_the_policy_that_meets_the_targets() -> None:
    """With targets and robots.hysteresis: auto the refit adopts the targets' policy as chosen: the exact
    hysteresis choice ranks by J, which does not rank policies under targets (with every weight 0 it
    chose all robots at every level, 95 of 300 items lost in the Scrapy comparison)."""
    from robotctl.model import Costs
    from robotctl.policies import Targets

    tr = _trace(ThresholdPolicy((4, 4, 3, 2, 1, 1)), 2000.0, seed=13)
    targets = Targets(max_loss=0.3, max_starvation=0.1)
    zero = Costs(loss=0.0, obsolescence=0.0, response=0.0, robot=0.0, starvation=0.0)
    plain = compute_refit(_input(tr, targets=targets))
    damped = compute_refit(replace(_input(tr, targets=targets), hysteresis=None, dwell_s=None, costs=zero))
    assert plain.success and damped.success and plain.policy is not None
    assert damped.policy == plain.policy and damped.policy.robots_at_level != (4,) * 6
    assert damped.fit["damping"]["method"] == "none" and "targets" in damped.fit["damping"]["reason"]
    assert damped.result is not None and damped.result.resume is None


def _gone(proc: Any) -> bool:
    """The process has exited (reaped here or by another thread)."""
    if not proc.is_alive():
        return True
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_shutdown_does_not_wait_for_a_running_refit_in_the_worker_process() -> None:
    """Issue 11, finding 10: SIGTERM took up to 7.5 s because the exit waited for the worker process to finish
    what it was computing (a refit, or the import of fitting and policies at start)."""
    import time

    from robotctl.agent.worker import RefitWorker

    worker = RefitWorker(kind="process")
    worker.start()
    executor = worker._executor
    assert executor is not None
    busy = executor.submit(time.sleep, 60)  # a computation that would hold the exit for a minute
    for _ in range(1200):  # a spawned worker starts in well under a second, but the machine may be busy
        if executor._processes and busy.running():  # type: ignore[attr-defined]
            break
        time.sleep(0.05)
    processes = list(executor._processes.values())  # type: ignore[attr-defined]
    assert processes and busy.running()
    worker.shutdown()
    deadline = time.monotonic() + 20  # a hang guard: on main the process slept on for its minute
    for proc in processes:
        proc.join(timeout=20)
        # the pool's own thread reaps its terminated worker too; when it wins the race for waitpid, our
        # poll sees ECHILD and reports the process alive until that thread has stored the exit code: so
        # a process counts as gone once reaped by anyone (its pid no longer exists)
        while not _gone(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(proc)


def _blas_threads(inp: object) -> list[int]:
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib.get("user_api") == "blas"]


@pytest.mark.parametrize("kind", ["inline", "thread", "process"])
async def test_the_refit_runs_blas_on_one_thread(kind: str) -> None:
    """The refit's matrices are small: OpenBLAS's thread pool nearly tripled a cold-start refit's CPU, so
    every worker kind computes with one BLAS thread, and the limit ends with the refit. (A worker process
    runs ``_compute_loaded``; it is called here, in this process, with the arrays already loaded.)"""
    from robotctl.agent.worker import RefitWorker, _compute_loaded

    before = _blas_threads(None)
    if kind == "process":
        during = _compute_loaded(_blas_threads, _NoArrays())  # type: ignore[arg-type]
    else:
        worker = RefitWorker(_blas_threads, kind=kind, timeout_s=120.0)  # type: ignore[arg-type]
        try:
            during = await worker.run(_NoArrays())  # type: ignore[arg-type]
        finally:
            worker.shutdown()
    assert during and set(during) == {1}, during
    assert _blas_threads(None) == before


@dataclasses.dataclass(frozen=True)
class _NoArrays:
    """A refit input without arrays, for a computation that reads none."""

    delivery_times: None = None
    pages: None = None
    modes: None = None
    service_times: None = None
    sizes_bytes: None = None


async def test_a_worker_processs_warnings_reach_the_agents_loggers_not_raw_stderr(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """A refit in a worker process that cannot meet its targets warns: the warning comes back with the
    outcome and is logged by the agent's logger (under its level and handlers), once; a spawned process
    has no handler, and Python's last resort had printed it raw on standard error."""
    clock = ManualClock(0.0)
    raw = _config(tmp_path, executor="process").to_dict(redact=False)
    cfg = AgentConfig.from_dict({**raw, "targets": {"max_loss": 1e-12, "max_starvation": 1e-12}})
    with caplog.at_level(logging.INFO, logger="robotctl.agent.refit"):
        async with run_in_process(cfg, clock=clock) as (_, app):
            feed(app[AGENT], clock, 1500.0, seed=3)
            outcome = await app[REFIT].refit("test")
            assert outcome.success and "targets not met" in outcome.message, outcome.message
            assert outcome.log_records == ()
    warned = [r for r in caplog.records if r.getMessage().startswith("event=targets_not_met")]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING and warned[0].name == "robotctl.agent.refit"
    assert "event=targets_not_met" not in capfd.readouterr().err
