"""The demo's closing report as plain text (no control codes)."""

from __future__ import annotations

import math

from ._demo import CrawlResult, DemoReport
from ._view import compact_levels

_ROWS = (
    ("arrival_rate", "offered rate (docs/s)", 2),
    ("p_loss", "P_loss", 3),
    ("p_obsolete", "P_obs", 3),
    ("p_starvation", "P_star", 3),
    ("mean_active_robots", "N_act", 2),
    ("mean_response_served", "V, response (s)", 3),
)


def _f(x: float | None, digits: int) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.{digits}f}"


def _cell(r: CrawlResult, key: str, digits: int) -> str:
    obs = _f(getattr(r.measures, key), digits)
    if r.predicted is None:
        return obs
    return f"{obs} ({_f(getattr(r.predicted, key), digits)})"


def _policy_text(r: CrawlResult) -> str:
    if r.kind == "robotctl":
        p = r.main_policy
        return f"{compact_levels(p.robots_at_level)} (j={','.join(map(str, p.thresholds)) or '-'})"
    return f"{r.policies[0].robots_at_level[0]} always"


def format_report(report: DemoReport) -> str:
    """The report: the runs side by side (observed, and predicted in parentheses), then the verdict."""
    cfg = report.config
    c = cfg.costs
    lines = [
        "",
        f"robotctl demo report: seed {cfg.demo.seed}, {cfg.robots.count} robots, K = {cfg.indexer.capacity}, "
        f"{cfg.demo.duration_s:g} s per run, measured after {cfg.demo.warmup_s:g} s of warm-up",
        f"cost J of paper 000 eq. (2): loss {c.loss:g}, obsolescence {c.obsolescence:g}, response {c.response:g}, "
        f"robot {c.robot:g}, starvation {c.starvation:g}",
        "observed (predicted by the model robotctl fitted, under the run's policy)",
        "",
    ]
    runs = list(report.runs)
    width = max(24, *(len(_cell(r, "mean_response_served", 3)) + 2 for r in runs))
    head = f"{'':24s}" + "".join(f"{r.label:>{width}s}" for r in runs)
    lines.append(head)
    lines.append(f"{'policy r(0..K)':24s}" + "".join(f"{_policy_text(r):>{width}s}" for r in runs))
    for key, name, digits in _ROWS:
        lines.append(f"{name:24s}" + "".join(f"{_cell(r, key, digits):>{width}s}" for r in runs))
    cost_cells = []
    for r in runs:
        pred = f" ({_f(r.predicted_cost.total, 2)})" if r.predicted_cost is not None else ""
        cost_cells.append(f"{_f(r.cost.total, 2)}{pred}")
    lines.append(f"{'cost J':24s}" + "".join(f"{x:>{width}s}" for x in cost_cells))
    for term in ("loss", "obsolescence", "response", "robot", "starvation"):
        lines.append(f"{'  ' + term:24s}" + "".join(f"{_f(getattr(r.cost, term), 2):>{width}s}" for r in runs))
    lines.append(f"{'documents offered':24s}" + "".join(f"{r.counts['offered']:>{width}d}" for r in runs))
    lines.append(f"{'documents indexed':24s}" + "".join(f"{r.counts['indexed']:>{width}d}" for r in runs))
    lines.append(f"{'parks / resumes':24s}" + "".join(f"{f'{r.parks} / {r.resumes}':>{width}s}" for r in runs))
    per_min = [(r.parks + r.resumes) / max(1, len(r.robots)) / (cfg.demo.duration_s / 60.0) for r in runs]
    lines.append(f"{'commands/robot/min':24s}" + "".join(f"{x:>{width}.2f}" for x in per_min))
    lines.append("")
    me = report.run("robotctl")
    savings = report.savings()
    if me is not None and savings:
        parts = []
        for label, pct in savings.items():
            word = "lower" if pct > 0 else "higher"
            parts.append(f"{abs(pct):.1f}% {word} than {label}")
        verdict = "beats both baselines" if all(p > 0 for p in savings.values()) else \
            "does NOT beat every baseline"
        lines.append(f"robotctl's realized cost {me.cost.total:.2f} is " + " and ".join(parts)
                     + f": it {verdict}.")
    if report.best_static is not None:
        sc = ", ".join(f"C_{r}={cost:.2f}" for r, cost in report.static_costs)
        lines.append(f"best static fleet under the fitted model: {report.best_static} robot(s) ({sc}).")
    gaps = report.prediction_gaps()
    if gaps:
        lines.append("distance of observed from predicted, |observed - predicted|:")
        for label, g in gaps.items():
            lines.append(f"  {label:12s} P_loss {g['p_loss']:.3f}   P_obs {g['p_obsolete']:.3f}   "
                         f"P_star {g['p_starvation']:.3f}")
    if me is not None:
        fit = me.agent.get("fit") or {}
        if fit:
            modes = fit.get("modes", {})
            rates = ", ".join(f"{m}: {_f(v.get('arrival_rate'), 1)}/s ({v.get('source', '?')})"
                              for m, v in sorted(modes.items(), key=lambda kv: int(kv[0])))
            life = fit.get("mean_useful_life_s")
            life_text = f"{_f(life, 2)} s" if life is not None else "none (too few obsolete drops yet)"
            lines.append(f"fitted traffic: arrival rate per mode {rates}; service mean "
                         f"{_f(fit.get('service_mean_s'), 4)} s, SCV {_f(fit.get('service_scv'), 1)}; useful life "
                         f"{life_text}")
        damping = fit.get("damping")
        if damping and damping.get("method") == "exact":
            observed = per_min[runs.index(me)] if me in runs else float("nan")
            lines.append(
                f"commands (robots.hysteresis: auto, chosen exactly under the fitted model: park and resume "
                f"vectors within {damping.get('max_commands_per_robot_min')} per robot per minute): predicted "
                f"{damping['commands_per_robot_per_min']:.2f}, observed {observed:.2f} commands per robot per "
                f"minute, at predicted cost {damping['cost']:.2f}; the plain thresholds r(i) give "
                f"{damping['undamped_commands_per_robot_per_min']:.1f} at cost {damping['undamped_cost']:.2f} "
                f"({100 * (damping['cost'] / damping['undamped_cost'] - 1):+.1f}%), the best static fleet costs "
                f"{damping['static_cost']:.2f}")
        elif damping:
            lines.append(
                f"damping (robots.hysteresis and dwell_s: auto, in the simulator under the fitted model and the "
                f"policy): hysteresis {damping.get('hysteresis', 0)} levels and dwell {damping['dwell_s']:.3g} s give "
                f"{damping['commands_per_robot_per_min']:.1f} park/resume commands per robot per minute at cost "
                f"{damping['cost']:.2f}; r(i) exactly gives "
                f"{damping['undamped_commands_per_robot_per_min']:.1f} at cost {damping['undamped_cost']:.2f} "
                f"({100 * (damping['cost'] / damping['undamped_cost'] - 1):+.1f}%)")
        spans = "; ".join(f"{compact_levels(s.robots_at_level)} ({s.source}) from {s.adopted_at:.1f} s, "
                          f"{s.window_s:.1f} s measured" for s in me.policies)
        lines.append(f"robotctl's policies: {spans}")
        work = 100 * me.service.get("work_share", 0.0)
        lines.append(f"observed service: mean {_f(me.service.get('mean_s'), 4)} s, SCV "
                     f"{_f(me.service.get('scv'), 1)} (real indexing work {_f(work, 0)}% of it)")
    for r in runs:
        a = r.agent
        lines.append(f"{r.label}: fetched {r.counts['fetched_pages']} pages and {r.counts['fetched_resources']} "
                     f"resources over HTTP ({r.counts['fetched_bytes'] / 1e6:.1f} MB); the index holds "
                     f"{r.index.get('docs', 0)} distinct documents ({r.index.get('terms', 0)} terms, "
                     f"{r.index.get('postings', 0)} postings); agent's queue matched the indexer's after "
                     f"{a['queue_compared'] - a['queue_mismatches']} of {a['queue_compared']} reports "
                     f"(at the end: agent {a['queue']}, indexer {a['indexer_queue']})")
    for note in report.notes:
        lines.append(f"note: {note}")
    lines.append(f"({report.seconds:.0f} s in all)")
    return "\n".join(lines)
