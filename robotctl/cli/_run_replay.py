"""``robotctl replay``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from robotctl._json import json_text
from robotctl.agent import ReplayOptions, ReplayResult, load_config, read_events
from robotctl.agent.replay import replay  # its module has the same name: robotctl.agent.replay may be either

from ._progress import Progress


def _fmt(x: float | None, spec: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _quality_lines(q: dict[str, Any]) -> list[str]:
    files = ", ".join(f"{name} ({fmt})" for name, fmt in q["formats"].items())
    lines = [f"trace: {q['events']:,} events from {len(q['files'])} file(s): {files}",
             f"  duplicates dropped {q['duplicates']}, out of order (sorted) {q['out_of_order']}, "
             f"gaps {q['gaps']} ({_fmt(q['gap_seconds'], '.6g')} s, longer than {_fmt(q['gap_bound_s'])} s)"]
    if q["skipped"]:
        lines.append("  lines not taken: " + ", ".join(f"{k} {v}" for k, v in sorted(q["skipped"].items())))
    lines.extend(f"  warning: {w}" for w in q["warnings"])
    return lines


#: Times above this are taken for Unix epoch seconds (2001 on): shown as a date and offsets from it.
_EPOCH_FROM = 1e9


def _duration(seconds: float) -> str:
    """``1:02:03`` (hours), ``2:03`` (minutes) or ``3.5 s``: a span for people, never ``1.79566e+09``."""
    if not math.isfinite(seconds):
        return "-"
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return f"{sign}{h}:{m:02d}:{sec:02d}" if h else f"{sign}{m}:{sec:02d}"


def _date(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def text_lines(result: ReplayResult) -> list[str]:
    """The text output of ``robotctl replay``: times as offsets from the trace's start (h:mm:ss), the start
    as a date when the trace is stamped in epoch seconds, failed refits in time order among the windows."""
    d = result.to_dict()
    lines = _quality_lines(d["trace"])
    t0, t1 = d["span"]
    epoch = t0 >= _EPOCH_FROM

    def at(t: float) -> str:
        return "+" + _duration(t - t0) if epoch else _fmt(t, ".1f")

    start = f"from {_date(t0)} " if epoch else f"from t = {_fmt(t0, '.1f')} s "
    lines.append(f"replayed {d['events']:,} events {start}over {_duration(t1 - t0)} ({t1 - t0:,.1f} s); refits "
                 f"{d['refits']['adopted']} adopted of {d['refits']['attempts']}"
                 + (" (at the live agent's refit lines)" if d["refits"]["from_log"] else " (refit.interval_s "
                    "and the drift check)"))
    rows: list[tuple[float, str]] = []
    for w in d["windows"]:
        rates = " ".join(f"{m}:{_fmt(v['arrival_rate'], '.3g')}" for m, v in sorted(w["fit"]["modes"].items()))
        span = f"{at(w['t_start'])} to {at(w['t_end'])}"
        policy = ",".join(map(str, w["policy"]["robots_at_level"]))
        live = "" if "live_policy" not in w else (
            "  (live: same)" if w["live_policy"] == w["policy"]["robots_at_level"]
            else f"  (live: {','.join(map(str, w['live_policy']))})")
        rows.append((w["t_end"], f"{span:<26}{rates:<38}{policy:<20}{_fmt(w['predicted']['cost'], '12.4f')}{live}"))
    for f in d["refits"]["failed"]:
        rows.append((f["t"], f"{'refit at ' + at(f['t']):<26}failed at {f['stage']} ({f['reason']}): {f['message']}"))
    if rows:
        lines.append("")
        when = "window (from the start)" if epoch else "window (s)"
        lines.append(f"{when:<26}{'rates per mode (pages/s)':<38}{'robots_at_level':<20}{'J predicted':>12}")
        lines.extend(row for _, row in sorted(rows, key=lambda r: r[0]))
    if d["comparison"]:
        lo, hi = d["compared_span"]
        lines.append("")
        lines.append(f"cost rate J over {at(lo)} to {at(hi)} ({_duration(hi - lo)}; {100 * d['level']:g}% "
                     "intervals)")
        for r in d["comparison"]:
            extra = ""
            if r["name"] == "best_static":
                extra = f"  ({r['robots']} robots always)"
            if r["basis"] == "simulated":
                extra += f"  predicted {_fmt(r['predicted'], '.4f')}"
            lines.append(f"  {r['name']:<12} {_fmt(r['cost'], '10.4f')}  [{_fmt(r['ci'][0], '.4f')}, "
                         f"{_fmt(r['ci'][1], '.4f')}]  {r['basis']}{extra}")
    if not result.success:
        lines.append(f"warning: {result.message}")
    return lines


def run_replay(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    table = read_events(args.traces, fmt=args.format, gap_s=args.gap_s)
    options = ReplayOptions(t_from=args.t_from, t_to=args.t_to, active=args.active, sim_events=args.events,
                            level=args.level, seed=args.seed)
    with Progress(1000, "replaying") as bar:
        result = replay(table, config, options, progress=lambda f: bar.advance(int(f * 1000) - bar.done))
    if args.report is not None:
        from ._replay_report import write_report

        note = write_report(args.report, result, config)
        if note:
            print(f"robotctl: {note}", file=sys.stderr)
    if args.json:
        print(json_text(result.to_dict(), indent=2))
    else:
        print("\n".join(text_lines(result)))
        if args.report is not None:
            print(f"report: {args.report}")
    return 0 if result.success else 1


__all__ = ["run_replay", "text_lines"]
