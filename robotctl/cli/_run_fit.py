"""``robotctl fit``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import yaml

from robotctl._json import json_text
from robotctl.agent import (
    EVENT_KINDS,
    TraceArrays,
    check_recognised,
    load_yaml,
    read_trace_arrays,
    read_trace_bytes,
)
from robotctl.fitting import ModeTrajectory, fit_model, waiting_exposure
from robotctl.model import InputError, costs_from_dict

from ._progress import Progress


class _Dumper(yaml.SafeDumper):
    """Block style, except vectors and matrices of numbers, which print on one line each."""


def _numeric(x: Any, depth: int) -> bool:
    if isinstance(x, list):
        return depth > 0 and all(_numeric(v, depth - 1) for v in x)
    return (isinstance(x, int | float) and not isinstance(x, bool)) or x is None


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and _numeric(data, 2)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_yaml(doc: Any) -> str:
    """A model file as YAML: readable blocks, one line per vector or matrix row set."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110, allow_unicode=True)


def _load_costs(path: str) -> dict[str, float]:
    doc = load_yaml(path)
    if isinstance(doc, dict) and "costs" in doc:
        doc = doc["costs"]
    try:
        return costs_from_dict(doc).to_dict()
    except InputError as exc:
        raise InputError(f"{path}: {exc.field}", exc.problem, exc.hint) from exc


def _check_order(tr: TraceArrays, allow_sort: bool) -> np.ndarray | None:
    """The stable time order of the events, or None when they are in order already."""
    back = np.flatnonzero(tr.t[1:] < tr.t[:-1]) + 1
    if not back.size:
        return None
    if not allow_sort:
        i = int(back[0])
        raise InputError(f"{tr.name}:{int(tr.line[i])}.t",
                         f"is {float(tr.t[i])!r}, earlier than the event before it ({float(tr.t[i - 1])!r}); "
                         f"{back.size} event(s) go back in time", "sort the trace by t, or pass --sort")
    return np.argsort(tr.t, kind="stable")


def _modes(tr: TraceArrays, field: str, rows: np.ndarray, kind: str = "a delivery") -> np.ndarray:
    m = tr.extra[field][rows]
    bad = np.flatnonzero(np.isnan(m) | (m < 0) | (m != np.round(m)))
    if bad.size:
        i = int(rows[bad[0]])
        what = "is missing" if np.isnan(m[bad[0]]) else f"is {m[bad[0]]:g}, not a whole number >= 0"
        raise InputError(f"{tr.name}:{int(tr.line[i])}.{field}", f"{what} on {kind}",
                         "--mode-field must name a column with the number of active robots on every delivery "
                         "(the agent writes `active`)")
    return m.astype(np.int64)


def _service(tr: TraceArrays, rate: float | None) -> dict[str, Any]:
    has_svc = ~np.isnan(tr.service_s)
    if has_svc.any():
        return {"service_times": tr.service_s[has_svc] / tr.pages[has_svc]}
    for kind in ("completion", "delivery"):
        rows = tr.kind(kind) & ~np.isnan(tr.bytes)
        if rows.any():
            if rate is None:
                raise InputError("--processing-rate-bps", f"is needed: the trace has sizes (bytes on {kind} lines) "
                                 "but no service_s", "give the indexer's bytes per second, e.g. "
                                 "--processing-rate-bps 2e6")
            return {"sizes_bytes": tr.bytes[rows] / np.maximum(tr.pages[rows], 1), "processing_rate_bps": rate}
    raise InputError(f"{tr.name}: service_s", "no service information: no line has service_s or bytes",
                     "add service_s to the completion lines, or bytes to the deliveries with --processing-rate-bps")


def _obsolescence(tr: TraceArrays, order: np.ndarray | None) -> dict[str, Any]:
    idx = np.arange(tr.n) if order is None else order
    ev, pages, t = tr.event[idx], tr.pages[idx], tr.t[idx]
    obsolete = ev == EVENT_KINDS.index("obsolete")
    if not obsolete.any() or not (ev == EVENT_KINDS.index("completion")).any():
        return {"obsolete_drops": int(pages[obsolete].sum()) if obsolete.any() else None}
    sign = np.zeros(len(EVENT_KINDS))
    sign[EVENT_KINDS.index("delivery")] = 1
    for k in ("loss", "completion", "obsolete"):
        sign[EVENT_KINDS.index(k)] = -1
    deltas = sign[ev] * pages
    levels = np.where(ev == EVENT_KINDS.index("queue"), pages.astype(float), np.nan)
    exposure, _ = waiting_exposure(t, deltas, levels)
    return {"obsolete_drops": int(pages[obsolete].sum()), "obsolete_exposure_s": exposure}


def _mode_changes(tr: TraceArrays, field: str, order: np.ndarray | None) -> ModeTrajectory | None:
    """The mode over the trace, from the park/resume lines that carry ``field`` (the number of robots
    active after the change): from the first event with the first value of ``field`` on any line, each
    change on, until the last event. None when the trace has no such lines."""
    idx = np.arange(tr.n) if order is None else order
    t, ev, value = tr.t[idx], tr.event[idx], tr.extra[field][idx]
    known = ~np.isnan(value)
    change = known & ((ev == EVENT_KINDS.index("park")) | (ev == EVENT_KINDS.index("resume")))
    if not change.any():
        return None
    _modes(tr, field, idx[change], "a park or resume line")
    first = int(np.flatnonzero(known)[0])
    return ModeTrajectory(np.concatenate([[t[0]], t[change]]),
                          np.concatenate([[value[first]], value[change]]).astype(np.int64), end_s=float(t[-1]))


def _settings(args: argparse.Namespace) -> tuple[int, dict[str, float] | None, dict[str, Any]]:
    """Capacity, costs and fit settings: the flags, else the sidecar's configuration (``--config``)."""
    costs = _load_costs(args.costs) if args.costs else None
    capacity = args.capacity
    extra: dict[str, Any] = {"modes": args.modes, "processing_rate_bps": args.processing_rate_bps,
                             "mean_useful_life_s": args.mean_useful_life_s, "options": {}}
    if args.config is not None:
        from robotctl.agent import load_config

        cfg = load_config(args.config)
        capacity = capacity if capacity is not None else cfg.capacity
        costs = costs if costs is not None else cfg.costs.to_dict()
        if extra["modes"] is None:
            extra["modes"] = tuple(m for m in cfg.all_modes if m >= 1)
        for key in ("processing_rate_bps", "mean_useful_life_s"):
            if extra[key] is None:
                extra[key] = getattr(cfg.fit, key)
        extra["options"] = dict(cfg.fit.options)
    if capacity is None:
        raise InputError("--capacity", "is needed: a trace cannot tell the indexer's buffer K",
                         "give --capacity K, or --config with the sidecar's configuration (queue.capacity)")
    return capacity, costs, extra


def run_fit(args: argparse.Namespace) -> int:
    capacity, costs, settings = _settings(args)
    with Progress(2, "fit") as bar:
        extra = (args.mode_field,) if args.mode_field else ()
        data = read_trace_bytes(args.trace)
        # fit reads traces only; a crawler's own log gets "format not recognised", not "has no column t"
        check_recognised(data, args.trace, formats=("jsonl", "csv"))
        tr = read_trace_arrays(args.trace, extra_fields=extra, data=data)
        bar.advance()
        order = _check_order(tr, args.sort)
        rows = np.flatnonzero(tr.kind("delivery"))
        if rows.size == 0:
            raise InputError(tr.name, "holds no delivery events", 'a trace for fitting needs lines with '
                             '"event": "delivery" (or no event field)')
        if args.mode_field and np.isnan(tr.extra[args.mode_field]).all():
            raise InputError(f"{tr.name}: {args.mode_field}", "no line has this column",
                             "--mode-field must name the column with the number of active robots (e.g. active)")
        modes = _modes(tr, args.mode_field, rows) if args.mode_field else None
        obs = _obsolescence(tr, order)
        options: dict[str, Any] = {**settings["options"], "out_of_order": "sort" if args.sort else "error"}
        if args.batch_resolution_s is not None:
            options["batch_resolution_s"] = args.batch_resolution_s
        if args.censor_above_s is not None:
            options["censor_above_s"] = args.censor_above_s
        changes = _mode_changes(tr, args.mode_field, order) if args.mode_field else None
        fit = fit_model(tr.t[rows], pages=tr.pages[rows], modes=modes, all_modes=settings["modes"],
                        mode_changes=changes,
                        mean_useful_life_s=settings["mean_useful_life_s"], capacity=capacity, options=options,
                        obsolete_drops=obs.get("obsolete_drops") if "obsolete_exposure_s" in obs else None,
                        obsolete_exposure_s=obs.get("obsolete_exposure_s"),
                        **_service(tr, settings["processing_rate_bps"]))
        bar.advance()
    doc = fit.to_dict()
    if costs is not None:
        doc = {"model": doc["model"], "costs": costs, "report": doc["report"]}
    if args.output == "json":
        print(json_text(doc, indent=2))
    else:
        sys.stdout.write(dump_yaml(doc))
    return 0 if fit.success else 1


__all__ = ["dump_yaml", "run_fit"]
