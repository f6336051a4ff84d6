"""Prometheus metrics of the agent, on its own ``CollectorRegistry`` (never the global one).

Two kinds:

- *Instruments* updated where things happen: the fit and solve duration histograms, the refit
  counters, the acknowledgement latency of deliveries.
- *Derived values* read at scrape time by :class:`AgentCollector` from the agent's state and from one
  :class:`~agent.policy.PolicySnapshot` (so a scrape never shows half of a policy update): the
  counters of deliveries, pages, bytes, completions, obsolete drops and losses; the queue length;
  active and desired robots; the actuation (``actuation{actuation="command"|"advise"}``) and the
  override (``override{override="auto"|"paused"|"pinned"}``) in force; ``robots_at_level``, the
  thresholds and the policy kind in force (``policy_kind{kind="thresholds"|"mdp"}``) and why
  (``policy_kind_reason{reason}``); where the policy came from
  (``policy_origin{origin="startup"|"cold"|"regular"|"warm"}``); the fit's check status
  (``fit_status{status}``); the fitted arrival rates and
  correlations per mode and the fallback rungs; and each predicted measure next to its observed
  counterpart over the same window (label ``source="predicted"|"observed"``).

Names follow ``robotctl_<subsystem>_<name>_<unit>``; counters end in ``_total``; the words are the
glossary's (docs/ARCHITECTURE.md): a *mode* label is a number of active robots.

Deprecated names (:data:`DEPRECATED_METRICS`), exported alongside the new ones for this release so that
dashboards and alerts keep working while they move, and removed in the next: ``robotctl_control_mode{mode}``
(now ``robotctl_actuation{actuation}``), ``robotctl_control_override{mode}`` (``robotctl_override{override}``),
``robotctl_control_robots`` and ``robotctl_control_until_timestamp_seconds`` (``robotctl_override_robots``,
``robotctl_override_until_timestamp_seconds``), ``robotctl_policy_control{control}``
(``robotctl_policy_kind{kind}``).

Two signals for two time scales. ``robotctl_desired_robots`` is r(i) at the current queue length, in
virtual robots: it changes at every delivery and completion, which the robots follow by long-poll, far
faster than a scrape. ``robotctl_policy_max_robots`` is the pool of real robots the policy in force can
ever keep active (the real robots of virtual robots 1..max_i r(i)); it changes only when a policy is
adopted (or control is overridden). ``robotctl_scaling_target_robots`` is what an autoscaler (KEDA, an HPA on
external metrics) sizes the pool of robot workers on (deploy/README.md): the policy's pool in command mode,
the whole configured fleet in advise mode (shadow mode never shrinks the pool).

The registry also holds the standard ``process_*``, ``python_info`` and ``python_gc_*`` collectors and
``robotctl_build_info{version}``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from robotctl import __version__

from .compute import RefitOutcome
from .core import Agent
from .override import Override
from .policy import ORIGINS, POLICY_KINDS
from .refit import RefitRecord

NAMESPACE = "robotctl"

#: Deprecated metric names and the names that replace them (both are exported for this release).
DEPRECATED_METRICS = {
    "robotctl_control_mode": "robotctl_actuation",
    "robotctl_control_override": "robotctl_override",
    "robotctl_control_robots": "robotctl_override_robots",
    "robotctl_control_until_timestamp_seconds": "robotctl_override_until_timestamp_seconds",
    "robotctl_policy_control": "robotctl_policy_kind",
}
#: Values of the actuation: the agent parks and resumes robots, or only advises (shadow mode).
ACTUATIONS = ("command", "advise")


def _deprecated(name: str) -> str:
    """The start of a metric's help: "Deprecated: use <new name>. " for a deprecated name, else nothing."""
    new = DEPRECATED_METRICS.get(f"{NAMESPACE}_{name}")
    return "" if new is None else f"Deprecated: use {new}. "

#: Buckets of the fit and solve histograms (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: Buckets of the acknowledgement latency (seconds).
ACK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

#: Label values of ``robotctl_fit_status``: the fitting's FitStatus values, and ``none`` for a policy that
#: no fit produced (the start-up policy, a configured one).
FIT_STATUSES = ("ok", "fallback", "insufficient_data", "none")
#: Label values of ``robotctl_policy_kind_reason``: why the policy kind in force is the one in force.
#: ``as_configured``: policy.kind asked for it (thresholds; or mdp, and the MDP is in force);
#: ``targets_set``, ``assumptions_not_met``, ``mdp_unsolved``: policy.kind: mdp, but the threshold
#: optimum stays (GET /v1/policy, policy_control.reason, says it in words).
POLICY_KIND_REASONS = ("as_configured", "targets_set", "assumptions_not_met", "mdp_unsolved")

#: (metric suffix, Measures field, help) of the measures exported predicted and observed.
MEASURES = (
    ("offered_pages_per_second", "arrival_rate", "pages offered per second (lambda, paper 000 eq. (9))"),
    ("loss_ratio", "p_loss", "fraction of offered pages lost at the buffer (P_loss)"),
    ("obsolete_ratio", "p_obsolete", "fraction of offered pages dropped as obsolete (P_obs)"),
    ("starvation_ratio", "p_starvation", "fraction of time the indexer has nothing to do (P_starvation)"),
    ("mean_active_robots", "mean_active_robots", "time-average number of active virtual robots (N_act)"),
    ("response_time_seconds", "mean_response_served", "mean sojourn of indexed pages (V^(1))"),
)


def scaling_target_robots(agent: Agent) -> int:
    """The robot pool an autoscaler sizes (``robotctl_scaling_target_robots``; deploy/README.md).

    Command actuation: :meth:`Agent.policy_max_robots`, the real robots the policy in force can ever keep active,
    plus one while that is every registered robot and fewer are registered than the fleet provides for: the
    policy is solved for the registered robots only, so without that one the pool could never grow back
    after a scale-down. Advise actuation (shadow mode): the whole configured fleet, what runs without the agent and
    what KEDA's fallback runs; advice never shrinks the pool."""
    act = agent.actuator
    if agent.fleet.actuation == "advise":
        return act.max_rank
    target = agent.policy_max_robots()
    registered = len(act.robots)
    if 0 < registered < act.max_rank and target >= registered:
        target = registered + 1
    return min(target, act.max_rank)


class AgentCollector(Collector):
    """Derived values of one agent, read at scrape time (see the module docstring)."""

    def __init__(self, agent: Agent, refit_record: Callable[[], RefitRecord | None]) -> None:
        self.agent = agent
        self.refit_record = refit_record

    def describe(self) -> list[Metric]:
        # no descriptions: the registry must not call collect() at registration
        return []

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        now = a.clock.now()
        snap = a.policy  # one reference: the whole scrape sees one policy
        tot = a.totals

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"{NAMESPACE}_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float | None = None, labels: list[str] | None = None
                  ) -> GaugeMetricFamily:
            if labels is not None:
                return GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=labels)
            return GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, value=math.nan if value is None else value)

        yield counter("deliveries", "Deliveries acknowledged.", tot.deliveries)
        yield counter("delivered_pages", "Pages delivered (offered), lost ones included.", tot.pages)
        yield counter("delivered_bytes", "Bytes of delivered pages, where reported.", tot.bytes)
        yield counter("lost_pages", "Delivered pages lost at the full buffer (partial admission at K).",
                      tot.lost)
        yield counter("completed_pages", "Pages whose indexing finished.", tot.completed_pages)
        yield counter("obsolete_pages", "Waiting pages dropped as obsolete.", tot.obsolete)
        yield counter("given_up_pages", "Pages the crawler gave up on (never fetched; POST /v1/given_up), "
                      "counted in the observed cost like pages lost.", tot.given_up)
        yield counter("unmatched_pages", "Completions and obsolete drops beyond the queue view "
                      "(a resynchronisation is due).", tot.completed_unmatched + tot.obsolete_unmatched)
        yield counter("queue_resyncs", "Queue resynchronisations by POST /v1/queue.", tot.resyncs)
        bad = CounterMetricFamily(f"{NAMESPACE}_http_bad_requests", "Requests refused with 4xx, by endpoint.",
                                  labels=["endpoint"])
        for endpoint, n in sorted(tot.bad_requests.items()):
            bad.add_metric([endpoint], n)
        yield bad
        cmd = CounterMetricFamily(f"{NAMESPACE}_robot_commands", "Park and resume commands issued.",
                                  labels=["state"])
        for state, n in a.commands_issued().items():
            cmd.add_metric([state], n)
        yield cmd

        yield gauge("queue_length_pages", "Pages in the system (being indexed or waiting).", a.queue_length)
        yield gauge("queue_capacity_pages", "K, the buffer's capacity.", a.config.capacity)
        yield gauge("active_robots", "Virtual robots active (the mode): commanded (actuation command) or running "
                    "by themselves (advise).", a.mode)
        actuation = gauge("actuation", "1 for the actuation in force, 0 for the other: command (robots parked "
                          "and resumed) or advise (shadow mode: desired_robots is exported, nobody is parked).",
                          labels=["actuation"])
        for name in ACTUATIONS:
            actuation.add_metric([name], float(a.fleet.actuation == name))
        yield actuation
        control = gauge("control_mode", _deprecated("control_mode") + "1 for the actuation in force.",
                        labels=["mode"])
        control.add_metric([a.fleet.actuation], 1)
        yield control
        yield gauge("desired_robots", "r(i): virtual robots the policy wants at the current queue length.",
                    a.desired())
        robots = gauge("robots", "Registered real robots by state, each once: active, parked, or lost (lease "
                       "expired: it runs its default state).", labels=["state"])
        for state, n in a.robot_counts(now).items():
            robots.add_metric([state], n)
        yield robots

        yield gauge("policy_max_robots", "Real robots the policy in force keeps active at its largest mode; "
                    "changes only when a policy is adopted (in advise actuation too: what it would run).",
                    a.policy_max_robots())
        yield gauge("scaling_target_robots", "The robot pool an autoscaler (KEDA) sizes: in command actuation the "
                    "real robots the policy in force can keep active (one more while it uses every registered robot "
                    "and fewer than robots.count are registered, so that the pool can grow back); in advise "
                    "actuation the whole configured fleet (shadow mode never shrinks the pool).",
                    scaling_target_robots(a))
        registered, expected = len(a.actuator.robots), a.actuator.max_rank
        yield gauge("robots_missing", "Real robots of robots.count (and robots.group_size) that are not registered; "
                    "the policy is solved for the registered ones only (with none registered at all, robots run "
                    "unregistered and every one is counted on).", max(0, expected - registered))
        yield gauge("robots_registered_below_count", "1 while fewer robots are registered than robots.count "
                    "provides for (robotctl_robots_missing), else 0.", float(registered < expected))
        ctl = a.override_state
        held = None if ctl.robots is None else float(ctl.robots)
        for name, label in (("override", "override"), ("control_override", "mode")):
            override = gauge(name, _deprecated(name) + "1 for who sets the active robots: auto (the policy), paused or "
                             "pinned (POST /v1/override).", labels=[label])
            for who in Override:
                override.add_metric([who.value], float(ctl.override is who))
            yield override
        for prefix in ("override", "control"):
            yield gauge(f"{prefix}_robots", _deprecated(f"{prefix}_robots") + "Active virtual robots held by an "
                        "override (NaN under the policy).", held)
            yield gauge(f"{prefix}_until_timestamp_seconds", _deprecated(f"{prefix}_until_timestamp_seconds") +
                        "Agent time an override ends by itself (NaN: until resumed).", ctl.until)
        yield gauge("policy_version", "Version of the policy in force.", snap.version)
        yield gauge("policy_adopted_timestamp_seconds", "Agent time the policy in force was adopted.",
                    snap.adopted_at)
        levels = gauge("policy_robots_at_level", "r(i) of the policy in force.", labels=["level"])
        for i, r in enumerate(snap.policy.robots_at_level):
            levels.add_metric([str(i)], r)
        yield levels
        th = gauge("policy_threshold_pages", "The paper's thresholds j_r of the policy in force.",
                   labels=["index", "mode"])
        for idx, (j, m) in enumerate(zip(snap.thresholds, snap.modes, strict=False), start=1):
            th.add_metric([str(idx), str(m)], j)
        yield th
        src = gauge("policy_source", "1 for where the policy in force came from.", labels=["source"])
        src.add_metric([snap.source], 1)
        yield src
        for name, label in (("policy_kind", "kind"), ("policy_control", "control")):
            kind = gauge(name, _deprecated(name) + "1 for the policy kind in force: thresholds (r(i) from the queue "
                         "length) or mdp (paper 001's MDP policy, policy.kind: mdp, where the fitted traffic meets "
                         "its assumptions); 0 for the other.", labels=[label])
            for value in POLICY_KINDS:
                kind.add_metric([value], float(snap.kind == value))
            yield kind
        why = gauge("policy_kind_reason", "1 for why the policy kind in force is the one: as_configured, or with "
                    "policy.kind: mdp why the threshold optimum stays (targets_set, assumptions_not_met, "
                    "mdp_unsolved; GET /v1/policy says it in words).", labels=["reason"])
        code = snap.fit.get("control", {}).get("reason_code") or "as_configured"
        for name in POLICY_KIND_REASONS:
            why.add_metric([name], float(code == name))
        yield why
        origin = gauge("policy_origin", "1 for where the policy in force came from: startup (the configured "
                       "policy, before any fit), cold (a cold-start refit on the first deliveries), regular "
                       "(a regular refit) or warm (the last good policy of an earlier run); 0 for the others.",
                       labels=["origin"])
        for name in ORIGINS:
            origin.add_metric([name], float(snap.origin == name))
        yield origin

        rate = gauge("fit_arrival_pages_per_second", "Fitted arrival rate per mode (active robots).",
                     labels=["mode"])
        corr = gauge("fit_lag1_correlation", "Fitted lag-1 correlation of inter-batch times per mode.",
                     labels=["mode"])
        for m, d in sorted(snap.fit.get("modes", {}).items()):
            if d.get("arrival_rate") is not None:
                rate.add_metric([m], d["arrival_rate"])
            if d.get("lag1_correlation") is not None:
                corr.add_metric([m], d["lag1_correlation"])
        yield rate
        yield corr
        met = gauge("targets_met", "1 where the policy in force meets the target (targets:) on the fitted model, "
                    "0 where it does not.", labels=["target"])
        for target, ok in sorted(snap.fit.get("targets", {}).get("met", {}).items()):
            met.add_metric([target], float(ok))
        yield met
        status = gauge("fit_status", "1 for the check status of the fit behind the policy in force: ok (every "
                       "part at its exact rung), fallback (a part used a lower rung: fit_fallback_rung), "
                       "insufficient_data, or none (no fit: the start-up or a configured policy).",
                       labels=["status"])
        fit_status = snap.fit.get("status") or "none"
        for name in FIT_STATUSES:
            status.add_metric([name], float(fit_status == name))
        yield status
        rung = gauge("fit_fallback_rung", "1 for the fallback rung each part of the last fit used.",
                     labels=["part", "rung"])
        for part, name in sorted(snap.fit.get("rungs", {}).items()):
            rung.add_metric([part, name], 1)
        yield rung

        obs = a.observed(now)
        yield gauge("observed_window_seconds", "Time covered by the observed measures.", obs.window_s)
        for suffix, attr, doc in MEASURES:
            g = gauge(suffix, doc.capitalize() + "; predicted by the fitted model or observed over "
                      "refit.window_s.", labels=["source"])
            if snap.measures is not None:
                g.add_metric(["predicted"], float(getattr(snap.measures, attr)))
            g.add_metric(["observed"], float(getattr(obs, attr)))
            yield g
        cost = gauge("cost", "Cost rate J of paper 000 eq. (2), predicted or observed (observed: with the pages "
                     "given up at the loss weight).", labels=["source"])
        if snap.cost is not None:
            cost.add_metric(["predicted"], snap.cost.total)
        cost.add_metric(["observed"], obs.cost)
        yield cost

        rec = self.refit_record()
        if rec is not None:
            yield gauge("refit_last_success", "1 if the last refit was adopted, 0 if it failed.",
                        None if rec.last_success is None else float(rec.last_success))
            yield gauge("refit_last_timestamp_seconds", "Agent time of the last refit attempt.", rec.last_at)
            yield gauge("refit_running", "1 while a refit runs.", float(rec.running))

        st = a.log_stats()
        yield counter("log_written_bytes", "Bytes appended to the delivery log.", st.bytes_written)
        yield counter("log_fsyncs", "fsync calls on the delivery log.", st.fsyncs)
        yield counter("log_quarantined_lines", "Delivery log lines that did not parse or validate at recovery, "
                      "moved to quarantine.jsonl.", st.quarantined)
        yield gauge("log_writable", "1 while the delivery log can be written, 0 while deliveries are answered "
                    "503 (a failed rotation or write; the agent retries every second).", float(st.fault is None))
        yield counter("log_faults", "Times the delivery log became unwritable (directory read-only, disk full).",
                      st.faults)
        yield counter("state_files_set_aside", "Files in log.dir renamed NAME.bad-N at the start because they "
                      "could not be used (a directory, FIFO or link where a file belongs, a corrupt robots.json "
                      "or policy.json).", st.set_aside + a.state_files_set_aside)
        yield counter("clock_steps", "Clock steps found: the delivery log ahead of the clock at the start (the "
                      "clock was set back); stamps then follow the clock.", a.clock_steps)
        yield gauge("clock_step_seconds", "The last clock step found, seconds (negative: set back).",
                    a.clock_step_s)
        yield gauge("clock_wall_offset_seconds", "Wall clock minus the agent's clock (monotonic since the start): "
                    "a wall-clock correction since the start shows here; intervals are not affected.",
                    time.time() - a.clock.now())


class AgentMetrics:
    """The registry and the instruments of one agent.

    Parameters
    ----------
    registry : CollectorRegistry
        Give each app its own; two apps in one process never collide.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.fit_seconds = Histogram("fit_duration_seconds", "Wall time of fitting.model fits in refits.",
                                     namespace=NAMESPACE, buckets=DURATION_BUCKETS, registry=registry)
        self.solve_seconds = Histogram("solve_duration_seconds", "Wall time of the threshold optimisation "
                                       "in refits.", namespace=NAMESPACE, buckets=DURATION_BUCKETS,
                                       registry=registry)
        self.refits = Counter("refits", "Refit attempts by outcome (adopted or failed).", ["outcome"],
                              namespace=NAMESPACE, registry=registry)
        self.refit_failures = Counter("refit_failures",
                                      "Refits that kept the last good policy, by the stage that "
                                      "failed (input, fit, solve, timeout, check).", ["stage"], namespace=NAMESPACE,
                                      registry=registry)
        self.fit_check = Gauge("fit_check", "The last refit's model check (issue 27): 1 for its status (ok: the "
                               "fitted model prices the policy in force as observed; misfit: it does not; "
                               "uncertain: the window cannot tell), 0 for the others.", ["status"],
                               namespace=NAMESPACE, registry=registry)
        self.ack_seconds = Histogram("delivery_ack_seconds", "Time from receiving a delivery request to its "
                                     "acknowledgement (log write and commit included).", namespace=NAMESPACE,
                                     buckets=ACK_BUCKETS, registry=registry)
        self.build = Info("build", "The robotctl build serving these metrics.", namespace=NAMESPACE,
                          registry=registry)
        self.build.info({"version": __version__})
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        for stage in ("input", "fit", "solve", "timeout", "check"):
            self.refit_failures.labels(stage)
        for outcome in ("adopted", "failed"):
            self.refits.labels(outcome)
        for status in ("ok", "misfit", "uncertain"):
            self.fit_check.labels(status).set(0.0)

    def attach(self, agent: Agent, refit_record: Callable[[], RefitRecord | None]) -> AgentCollector:
        collector = AgentCollector(agent, refit_record)
        self.registry.register(collector)
        return collector

    def observe_refit(self, outcome: RefitOutcome, reason: str) -> None:
        if outcome.fit_seconds > 0:
            self.fit_seconds.observe(outcome.fit_seconds)
        if outcome.solve_seconds > 0:
            self.solve_seconds.observe(outcome.solve_seconds)
        self.refits.labels("adopted" if outcome.success else "failed").inc()
        if not outcome.success:
            self.refit_failures.labels(outcome.stage.value).inc()
        check = (outcome.result.fit.get("check") if outcome.result is not None else
                 {"status": "misfit"} if outcome.stage.value == "check" else None)
        if isinstance(check, dict) and check.get("status") in ("ok", "misfit", "uncertain"):
            for status in ("ok", "misfit", "uncertain"):
                self.fit_check.labels(status).set(1.0 if status == check["status"] else 0.0)
