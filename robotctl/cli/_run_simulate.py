"""``robotctl simulate``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from robotctl._json import json_text
from robotctl.agent import TraceEvent, load_model_file, write_trace
from robotctl.model import (
    Comparison,
    Estimate,
    InputError,
    SimulationResult,
    ThresholdPolicy,
    TraceKind,
    TraceRow,
    iter_simulate,
    solve,
)

from ._progress import Progress

#: Text output: (measure, label, unit).
LINES = (
    ("arrival_rate", "offered rate lambda", "pages/s"),
    ("p_loss", "P_loss", ""),
    ("p_obsolete", "P_obsolete", ""),
    ("p_success", "P_success", ""),
    ("p_starvation", "P_starvation", ""),
    ("mean_active_robots", "mean active robots", ""),
    ("mean_queue_length", "mean queue length", ""),
    ("mean_response_served", "mean response (served)", "s"),
    ("mean_sojourn_obsolete", "mean sojourn (obsolete)", "s"),
    ("mean_sojourn", "mean sojourn (all)", "s"),
    ("cost", "cost J", ""),
)
#: The trace rows that carry the number of active robots as the extra field "active".
_WITH_ACTIVE = (TraceKind.DELIVERY, TraceKind.PARK, TraceKind.RESUME)
_NO_EXTRA: Mapping[str, int] = MappingProxyType({})


# -- trace ----------------------------------------------------------------------------------------
def trace_event(row: TraceRow) -> TraceEvent:
    """A simulator row as a trace-file event; deliveries, park and resume carry ``active``."""
    extra = {"active": row.active} if row.kind in _WITH_ACTIVE else _NO_EXTRA
    return TraceEvent(t=row.t, event=row.kind.value, robot=None if row.robot is None else str(row.robot),
                      pages=row.pages, service_s=row.service_s, extra=extra)


class _Streamed:
    """Runs the simulation generator, turning its rows into trace events and its fractions into
    progress, and keeps its result."""

    def __init__(self, steps: Generator[tuple[float, tuple[TraceRow, ...]], None, SimulationResult],
                 bar: Progress) -> None:
        self.steps = steps
        self.bar = bar
        self.result: SimulationResult | None = None
        self.rows = 0

    def events(self) -> Iterator[TraceEvent]:
        while True:
            try:
                fraction, rows = next(self.steps)
            except StopIteration as stop:
                self.result = stop.value
                return
            self.bar.advance(int(fraction * 1000) - self.bar.done)
            self.rows += len(rows)
            for row in rows:
                yield trace_event(row)

    def run(self) -> SimulationResult:
        for _ in self.events():
            pass
        assert self.result is not None
        return self.result


# -- output ---------------------------------------------------------------------------------------
def _interval(e: Estimate) -> str:
    return f"{e.value:.6g} ± {e.half_width:.2g}"


def _text(result: SimulationResult, policy: ThresholdPolicy, seed: int, wall_s: float, total_events: int,
          comparison: Comparison | None, familywise: Comparison | None, trace: tuple[str, int] | None
          ) -> list[str]:
    lines = [f"robots_at_level {policy}   seed {seed}"]
    unit = f"{result.warmup_events:,} events" if result.stop.value == "events" else f"{result.warmup_s:g} s"
    rate = f"{total_events / wall_s:,.0f}" if wall_s > 0 else "-"
    lines.append(f"simulated {result.events:,} events = {result.duration_s:,.1f} s after a warm-up of "
                 f"{unit}, {result.batches} batches; {wall_s:.2f} s wall, {rate} events/s")
    lines.append(f"{result.level:.4g} confidence intervals by batch means"
                 + (" (exact value; inside?)" if comparison is not None else ""))
    rows = {r.name: r for r in comparison.rows} if comparison is not None else {}
    for name, label, u in LINES:
        if name == "cost" and result.cost is None:
            continue
        est = result.estimate(name)
        text = f"  {label:<26}{_interval(est):<26}{u:<8}"
        if name in rows:
            r = rows[name]
            text += f"exact {r.exact:.6g}  {'inside' if r.inside else 'OUTSIDE'}"
        lines.append(text.rstrip())
    dist = ", ".join(f"{m}: {e.value:.4f}" for m, e in result.active_robots_distribution if e.value > 0)
    lines.append(f"  time share of each mode    {dist}")
    lines.append(f"pages: {result.pages_offered:,} offered, {result.pages_lost:,} lost, "
                 f"{result.pages_obsolete:,} obsolete, {result.pages_served:,} served")
    if familywise is not None:
        verdict = "all inside" if familywise.all_inside else f"outside: {', '.join(familywise.outside)}"
        lines.append(f"exact values against family-wise {familywise.level:.4g} intervals "
                     f"(joint level {result.level:.4g}): {verdict}")
    if trace is not None:
        lines.append(f"trace: {trace[1]:,} events written to {trace[0]}")
    if not result.success:
        lines.append(f"warning: {result.message}")
    return lines


def run_simulate(args: argparse.Namespace) -> int:
    model, costs = load_model_file(args.model_file)
    model.check_policy(args.policy)
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
    events = args.events if args.events is not None or args.horizon_s is not None else 1_000_000
    if args.warmup is not None and events is not None and not float(args.warmup).is_integer():
        raise InputError("--warmup", f"counts events with --events, got {args.warmup}",
                         "give a whole number of events, or use --horizon-s for seconds")
    steps = iter_simulate(model, args.policy, np.random.default_rng(seed), events=events,
                          horizon_s=args.horizon_s, warmup=args.warmup, batches=args.batches,
                          level=args.level, costs=costs, trace=args.trace is not None)
    start = time.perf_counter()
    with Progress(1000, "simulating") as bar:
        streamed = _Streamed(steps, bar)
        if args.trace is not None:
            try:
                write_trace(args.trace, streamed.events())
            except OSError as exc:
                raise InputError("--trace", f"cannot write {args.trace} ({exc.strerror})",
                                 "check the directory exists and is writable") from exc
            assert streamed.result is not None
            result = streamed.result
        else:
            result = streamed.run()
    wall_s = time.perf_counter() - start
    total_events = result.events + result.warmup_events
    comparison = familywise = None
    exact_out: dict[str, Any] | None = None
    if args.exact:
        solution = solve(model, args.policy)
        if solution.success:
            comparison = result.check(solution.measures)
            familywise = result.check(solution.measures, familywise=True)
            exact_out = {
                "method": solution.method,
                "values": {r.name: r.exact for r in comparison.rows},
                "inside": {r.name: r.inside for r in comparison.rows},
                "z": {r.name: r.z for r in comparison.rows},
                "familywise_level": familywise.level,
                "all_inside_familywise": familywise.all_inside,
            }
        else:
            exact_out = {"method": solution.method, "error": solution.message}
    trace_info = (str(Path(args.trace)), streamed.rows) if args.trace is not None else None
    if args.json:
        out = result.to_dict()
        out.update({"seed": seed, "robots_at_level": list(args.policy.robots_at_level), "wall_s": wall_s,
                    "events_per_second": total_events / wall_s if wall_s > 0 else None})
        if trace_info is not None:
            out["trace_file"] = {"path": trace_info[0], "events": trace_info[1]}
        if exact_out is not None:
            out["exact"] = exact_out
        print(json_text(out, indent=2))
    else:
        print("\n".join(_text(result, args.policy, seed, wall_s, total_events, comparison, familywise,
                              trace_info)))
        if exact_out is not None and "error" in exact_out:
            print(f"exact solve failed: {exact_out['error']}")
    return 0 if result.success else 1


__all__ = ["run_simulate", "trace_event"]
