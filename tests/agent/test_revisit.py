"""The revisit planner in the agent: the cycle served to robots, re-planning when the fetch times robots
report move away from the plan's law, change-rate estimates, and the configuration."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from robotctl import InputError
from robotctl.agent.app import run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.revisit import REVISIT
from robotctl.fitting import fit_service
from robotctl.policies import FetchLaw, plan_revisits


def pages_csv(tmp_path: Path) -> str:
    path = tmp_path / "pages.csv"
    path.write_text("page,change_rate\n/a,0.5\n/b,1.0\n/c,2.0\n/d,0.1\n")
    return str(path)


async def _post(s: aiohttp.ClientSession, url: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    async with s.post(url, json=body, **kw) as r:
        return r.status, await r.json()


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with s.get(url) as r:
        return r.status, await r.json()


async def test_robots_get_the_cycle_in_order(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                             clock: ManualClock) -> None:
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path), "fetch_time": {"mean": 0.5}})
    plan = plan_revisits([0.5, 1.0, 2.0, 0.1], FetchLaw.exponential(2.0))
    assert plan.template is not None
    expect = ["/a", "/b", "/c", "/d"]
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        for rid in ("r1", "r2"):
            await _post(s, url + "/v1/robots", {"robot": rid})
        served = []
        for k in range(plan.template.size + 3):
            status, nxt = await _get(s, url + f"/v1/robots/{'r1' if k % 2 else 'r2'}/next")
            assert status == 200 and nxt["version"] == 1
            served.append(nxt["page"])
        cycle = [expect[int(i)] for i in plan.template]
        assert served == cycle + cycle[:3]  # one shared cycle across the fleet, wrapping around
        status, err = await _get(s, url + "/v1/robots/ghost/next")
        assert status == 404 and err["field"] == "robot"
        status, doc = await _get(s, url + "/v1/revisit")
        assert status == 200 and doc["pages"] == expect and doc["lower_bound"] == pytest.approx(plan.lower_bound)
        assert doc["template_cost"] == pytest.approx(plan.cost) and doc["law_source"] == "configured"
        assert app[REVISIT].snapshot.version == 1


async def test_replans_when_reported_fetch_times_move(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                                      clock: ManualClock) -> None:
    """Configured mean 2 s; robots report fetches of mean 0.2 s: after min_samples reports the fitted
    law replaces it and the plan (frequencies ~ ln 1/h_i change with E[X]) is recomputed."""
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path), "fetch_time": {"mean": 2.0}, "min_samples": 60,
                                  "check_every": 20})
    rng = np.random.default_rng(4)
    async with run_in_process(cfg, clock=clock) as (url, _app), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        versions, served, reported = [], [], []
        for _ in range(80):
            _, nxt = await _get(s, url + "/v1/robots/r1/next")
            served.append(nxt)
            clock.advance(0.2)
            fetch_s = float(rng.exponential(0.2))
            reported.append(fetch_s)
            status, ack = await _post(s, url + "/v1/robots/r1/fetched", {"page": nxt["page"], "fetch_s": fetch_s})
            assert status == 200
            versions.append(ack["version"])
        assert versions[0] == 1 and versions[-1] == 2 and versions.index(2) == 59  # the check at report 60
        _, doc = await _get(s, url + "/v1/revisit")
        assert doc["law_source"] == "fitted" and doc["fetch_time"]["mean_s"] == pytest.approx(0.2, rel=0.3)
        assert "fetch times" in doc["reason"]
        first_new = next(n for n in served if n["version"] == 2)
        assert first_new["slot"] == 0  # the new cycle starts at its first slot
        # the plan of version 2 is the plan for a PH law fitted to the first 60 reports
        law = FetchLaw.from_ph(fit_service(service_times=reported[:60]).fit.law)
        assert doc["fetch_time"]["mean_s"] == pytest.approx(np.mean(reported[:60]))
        expect = plan_revisits([0.5, 1.0, 2.0, 0.1], law)
        assert doc["frequencies"] == pytest.approx(expect.frequencies.tolist())
        assert doc["template_cost"] == pytest.approx(expect.cost)


async def test_no_replan_while_the_fetch_times_agree(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                                     clock: ManualClock) -> None:
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path), "fetch_time": {"mean": 0.5}, "min_samples": 50,
                                  "check_every": 25})
    rng = np.random.default_rng(5)
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        for _ in range(200):
            _, nxt = await _get(s, url + "/v1/robots/r1/next")
            await _post(s, url + "/v1/robots/r1/fetched", {"page": nxt["page"], "fetch_s": float(rng.exponential(0.5))})
        assert app[REVISIT].snapshot.version == 1 and app[REVISIT].fitted is not None
        status, ack = await _post(s, url + "/v1/revisit/replan")
        assert status == 200 and ack["replanned"] and ack["version"] == 2


async def test_change_rates_are_estimated_from_reports(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                                       clock: ManualClock) -> None:
    """Page /c reported changed at every other revisit 1 s apart: its MLE is ln 2 per second; with
    estimate_change_rates the re-plan uses it."""
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path), "fit_fetch_times": False,
                                  "estimate_change_rates": True, "min_observations": 30, "check_every": 1000})
    async with run_in_process(cfg, clock=clock) as (url, _app), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        for k in range(41):
            clock.advance(1.0)
            await _post(s, url + "/v1/robots/r1/fetched", {"page": "/c", "changed": k % 2 == 0})
        _, doc = await _get(s, url + "/v1/revisit")
        est = doc["change_rate_estimates"]["/c"]
        assert est["observations"] == 40 and est["rate"] == pytest.approx(np.log(2.0))
        assert est["status"] == "ok" and est["lower"] < est["rate"] < est["upper"]
        await _post(s, url + "/v1/revisit/replan")
        _, doc = await _get(s, url + "/v1/revisit")
        assert doc["rates_source"] == ["configured", "configured", "estimated", "configured"]
        assert doc["change_rates"][2] == pytest.approx(np.log(2.0))


async def test_bad_reports_are_400(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                   clock: ManualClock) -> None:
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path)}, server={"token": "s3cret-s3cret-s3cret"})
    auth = {"Authorization": "Bearer s3cret-s3cret-s3cret"}
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"}, headers=auth)
        for body, field in [({"page": "/zz"}, "page"), ({"page": "/a", "fetch_s": -1}, "fetch_s"),
                            ({"page": "/a", "changed": "yes"}, "changed"), ({"pages": "/a"}, "pages")]:
            status, err = await _post(s, url + "/v1/robots/r1/fetched", body, headers=auth)
            assert status == 400 and err["field"] == field
        status, err = await _post(s, url + "/v1/robots/r1/fetched", {"page": "/a"})
        assert status == 401


async def test_planner_is_off_without_pages(running: tuple[str, Any]) -> None:
    url, app = running
    assert REVISIT not in app
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/revisit") as r:
        assert r.status == 404


@pytest.mark.parametrize(("revisit", "field"), [
    ({"fetch_time": {"rate": -1}}, "revisit.fetch_time.rate"), ({"strategy": "greedy"}, "revisit.strategy"),
    ({"replan_bound": 0}, "revisit.replan_bound"), ({"pages": 3}, "revisit.pages"),
])
def test_config_section(config_factory: Callable[..., AgentConfig], revisit: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        config_factory(revisit=revisit)
    assert err.value.field == field


async def test_missing_page_list_is_an_input_error(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                                   clock: ManualClock) -> None:
    cfg = config_factory(revisit={"pages": str(tmp_path / "nope.csv")})
    with pytest.raises(InputError) as err:
        async with run_in_process(cfg, clock=clock):
            pass
    assert err.value.field.startswith("revisit.pages")


async def test_a_refused_report_names_its_field_and_counts_nothing(config_factory: Callable[..., AgentConfig],
                                                                   tmp_path: Path, clock: ManualClock) -> None:
    """Issue 23, defect 10: ``fetch_s`` had no upper bound; a report of 1e300 s was counted, and the re-fit it
    set off answered 400 naming another field."""
    cfg = config_factory(revisit={"pages": pages_csv(tmp_path), "min_samples": 2, "check_every": 1})
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        planner = app[REVISIT]
        for fetch_s in (1e300, 86_400.5, float(2**80)):
            status, err = await _post(s, url + "/v1/robots/r1/fetched", {"page": "/a", "fetch_s": fetch_s})
            assert status == 400 and err["field"] == "fetch_s", err
        assert planner.reports == 0
        for fetch_s in (0.0, 86_400.0, 0.0, 86_400.0):  # in bounds, however odd: taken, never a 400
            clock.advance(1.0)
            status, ack = await _post(s, url + "/v1/robots/r1/fetched", {"page": "/a", "fetch_s": fetch_s})
            assert status == 200, ack
        assert planner.reports == 4
