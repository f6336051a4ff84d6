"""The HTML report of ``robotctl replay --report``: one self-contained file (plots embedded as PNG, no
script, no network) with the queue, the active and desired robots and the thresholds over time, the
fitted rates per window, the cost comparison, and the tables behind them.

The plots need matplotlib (the optional extra ``reports``); without it the report holds the tables and
says how to install it.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError
from robotctl.agent import AgentConfig, ReplayResult

INSTALL_HINT = "pip install 'robotctl[reports]' (matplotlib) for the plots"
#: Points per curve in the time plots (the series are averaged over bins of time).
BINS = 1200

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1340px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; max-width: 100%; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.45em; text-align: right; vertical-align: top; }
.wide { overflow-x: auto; max-width: 100%; }
th { background: #eee; } td.l, th.l { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { background: #fff4d6; padding: 0.5em 1em; border-left: 4px solid #e0a800; }
"""


def _binned(t: NDArray[np.float64], values: NDArray[Any], bins: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Means of ``values`` over equal bins of time (empty bins left out)."""
    if t.size <= bins:
        return t, values.astype(float)
    edges = np.linspace(float(t[0]), float(t[-1]), bins + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=values.astype(float), minlength=bins)
    keep = counts > 0
    mid = (edges[:-1] + edges[1:]) / 2
    return mid[keep], sums[keep] / counts[keep]


def _png(fig: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(result: ReplayResult, capacity: int) -> list[tuple[str, str]]:
    """(title, base64 PNG) of each plot."""
    from matplotlib.figure import Figure

    out = []
    s = result.series
    t0 = float(s.t[0]) if s.t.size else 0.0
    fig = Figure(figsize=(11, 6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    x, q = _binned(s.t, s.queue, BINS)
    ax1.plot(x - t0, q, lw=0.8, color="tab:blue", label="queue length (mean per bin)")
    for w in result.windows:
        for j in w.thresholds:
            ax1.hlines(j + 0.5, w.in_force[0] - t0, w.in_force[1] - t0, colors="tab:red", lw=1.2)
    ax1.plot([], [], color="tab:red", label="thresholds j_r + 1/2 of the policy in force")
    ax1.set_ylim(-0.2, capacity + 0.2)
    ax1.set_ylabel("pages in the system")
    ax1.legend(loc="upper right", fontsize=8)
    xa, a = _binned(s.t, s.active, BINS)
    xd, d = _binned(s.t, s.desired, BINS)
    # the recorded fleet drawn wide and pale underneath, robotctl's thin line on top: both stay visible
    ax2.plot(xa - t0, a, lw=3.0, color="tab:gray", alpha=0.55, label="active robots (recorded fleet)", zorder=1)
    ax2.plot(xd - t0, d, lw=0.9, color="tab:green", label="robots robotctl would run, r(i)", zorder=2)
    for w in result.windows:
        ax2.axvline(w.in_force[0] - t0, color="tab:purple", lw=0.5, alpha=0.5)
    ax2.set_ylabel("robots")
    ax2.set_xlabel(f"seconds since {t0:.6g} (purple: refits adopted)")
    ax2.legend(loc="upper right", fontsize=8)
    out.append(("Queue, robots and thresholds over time", _png(fig)))

    if result.windows:
        fig = Figure(figsize=(11, 3.5))
        ax = fig.subplots()
        modes = sorted({int(m) for w in result.windows for m in w.fit.get("modes", {})})
        for m in modes:
            xs = [w.t_end - t0 for w in result.windows if str(m) in w.fit.get("modes", {})]
            ys = [w.fit["modes"][str(m)]["arrival_rate"] for w in result.windows if str(m) in w.fit.get("modes", {})]
            ax.plot(xs, ys, marker="o", ms=3, lw=1, label=f"{m} robots")
        ax.set_xlabel("end of the fit window (s)")
        ax.set_ylabel("fitted pages per second")
        ax.legend(fontsize=8, ncol=min(6, len(modes)))
        out.append(("Fitted arrival rate per mode, by refit window", _png(fig)))

    if result.comparison:
        fig = Figure(figsize=(6, 3.5))
        ax = fig.subplots()
        names = [r.name for r in result.comparison]
        vals = [r.cost for r in result.comparison]
        err = np.array([[r.cost - r.ci[0] for r in result.comparison], [r.ci[1] - r.cost for r in result.comparison]])
        ok = np.isfinite(vals)
        colors = ["tab:green", "tab:blue", "tab:gray"][: len(names)]
        ax.bar(np.arange(len(names))[ok], np.asarray(vals)[ok], yerr=err[:, ok], capsize=6,
               color=[c for c, k in zip(colors, ok, strict=True) if k])
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(f"cost rate J ({100 * result.level:g}% interval)")
        out.append(("Cost: robotctl against the best static fleet and the recorded fleet", _png(fig)))
    return out


def _num(v: Any, digits: int = 4) -> str:
    """A number for people: thousands separated, ``digits`` significant digits, '-' when unknown."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:,.{digits}g}"
    return str(v)


def _pct(v: Any) -> str:
    return "-" if v is None or not math.isfinite(float(v)) else f"{100 * float(v):.2g}%"


def _table(head: list[str], rows: list[list[Any]], left: int = 1) -> str:
    def cell(v: Any, i: int) -> str:
        text = v if isinstance(v, str) else _num(v)
        cls = ' class="l"' if i < left else ""
        return f"<td{cls}>{html.escape(text)}</td>"

    th = "".join(f'<th{" class=l" if i < left else ""}>{html.escape(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(cell(v, i) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<div class='wide'><table><tr>{th}</tr>{body}</table></div>"


def render(result: ReplayResult, config: AgentConfig) -> tuple[str, str | None]:
    """The report's HTML, and a note when the plots had to be left out."""
    d = result.to_dict()
    note = None
    try:
        plots = _plots(result, config.capacity)
    except ImportError:
        plots = []
        note = f"the report has no plots: matplotlib is not installed; {INSTALL_HINT}"
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>robotctl replay</title>",
             f"<style>{_STYLE}</style></head><body><h1>robotctl replay</h1>",
             f"<p>{html.escape(result.message)}; {d['events']:,} events over "
             f"{d['span'][1] - d['span'][0]:,.1f} s.</p>"]
    v = d["verdict"]

    def money(c: Any) -> str:
        if not c or c.get("cost") is None:
            return "not available"
        lo, hi = c["interval"]
        band = f" [{lo:,.4g} .. {hi:,.4g}]" if lo is not None and hi is not None else ""
        return f"{c['cost']:,.4g}{band} ({c['basis']})"

    parts.append(f"<h2>Verdict: {html.escape(v['status'])}</h2><p>robotctl's policies: J = "
                 f"{html.escape(money(v['robotctl']))}; the recorded fleet: J = {html.escape(money(v['recorded']))}."
                 f"<br>{html.escape(v['message'])}.</p>")
    if note:
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    q = d["trace"]
    parts.append("<h2>Trace</h2>")
    parts.append(_table(["file", "format"], [[f, q["formats"][f]] for f in q["files"]], left=2))
    parts.append(_table(["events", "duplicates dropped", "out of order", "gaps", "gap seconds", "gap bound (s)",
                         "timestamp resolution (s)"],
                        [[q["events"], q["duplicates"], q["out_of_order"], q["gaps"], q["gap_seconds"],
                          q["gap_bound_s"], q["resolution_s"]]], left=0))
    for w in q["warnings"]:
        parts.append(f"<p class='note'>{html.escape(w)}</p>")
    if d["comparison"]:
        lo, hi = d["compared_span"]
        parts.append(f"<h2>Cost comparison</h2><p>Cost rate J of paper 000 eq. (2) from {lo:.6g} to {hi:.6g} s; "
                     f"{100 * d['level']:g}% confidence intervals. Simulated: each refit window's fitted traffic "
                     "under the fleet's policy; observed: on the trace.</p>")
        parts.append(_table(["fleet", "cost J", "interval low", "interval high", "basis", "predicted (exact)"],
                            [[r["name"], r["cost"], r["ci"][0], r["ci"][1], r["basis"], r.get("predicted")]
                             for r in d["comparison"]], left=1))
    for title, png in plots:
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>")
    if d["windows"]:
        modes = sorted({m for w in d["windows"] for m in w["fit"]["modes"]}, key=int)
        rows = []
        for w in d["windows"]:
            fm = w["fit"]["modes"]
            lo, hi = w["predicted"].get("cost_interval") or [None, None]

            def per_mode(key: str, fm: Any = fm) -> str:
                return ", ".join(f"{m}: {_num(fm[m].get(key), 3)}" for m in modes if m in fm)

            rows.append([f"{w['t_start']:,.0f}–{w['t_end']:,.0f}", w["reason"], w["status"],
                         per_mode("arrival_rate"), per_mode("lag1_correlation"), per_mode("mean_batch_size"),
                         ", ".join(f"{k}: {v}" for k, v in sorted(w["fit"].get("rungs", {}).items())) or "-",
                         " ".join(map(str, w["policy"]["robots_at_level"])),
                         _num(w["predicted"]["cost"]) + ("" if lo is None or hi is None
                                                         else f" [{_num(lo)}, {_num(hi)}]"),
                         _pct(w["predicted"]["p_loss"]), _pct(w["predicted"]["p_starvation"])])
        head = ["fit window (s)", "reason", "status", "pages/s by robots", "rho1 by robots", "batch by robots",
                "fallback rungs", "robots at queue level 0, 1, ...", "J predicted [95%]", "P loss", "P starve"]
        parts.append("<h2>Refit windows</h2>" + _table(head, rows, left=3))
        parts.append("<p class='note'><b>Legend.</b> status: the window's model check (ok: the fitted model "
                     "priced the policy in force as observed; misfit: it did not; uncertain: nothing to check "
                     "against or too wide to tell; fallback: a rung of the fit fell back). pages/s by robots: the "
                     "fitted arrival rate with that many robots active (robots: rate); rho1: lag-1 correlation of "
                     "the intervals between deliveries (0 for Poisson traffic); batch: mean pages per delivery; "
                     "fallback rungs: where the fit fell back to a simpler law; robots at queue level: how many "
                     "robots the policy runs with 0, 1, 2, ... pages waiting; J: the cost rate of paper 000 eq. "
                     "(2), with its 95% interval from the fit's uncertainty (joint fit only); P loss, P starve: "
                     "predicted share of pages lost at a full buffer and of time the indexer waits idle.</p>")
    failed = d["refits"]["failed"]
    if failed:
        parts.append("<h2>Refits that failed</h2>" + _table(
            ["time", "reason", "stage", "message"], [[f"{f['t']:.6g}", f["reason"], f["stage"], f["message"]]
                                                     for f in failed], left=4))
    parts.append("</body></html>")
    return "\n".join(parts), note


def write_report(path: str, result: ReplayResult, config: AgentConfig) -> str | None:
    """Write the report to ``path``; returns a note when the plots were left out."""
    text, note = render(result, config)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError("--report", f"cannot write {path} ({exc.strerror})",
                         "check the directory exists and is writable") from exc
    return note


__all__ = ["INSTALL_HINT", "render", "write_report"]
