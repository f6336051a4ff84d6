"""``robotctl route``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse

from robotctl._json import json_text
from robotctl.agent import load_yaml
from robotctl.model import BMAP, InputError
from robotctl.policies import RoutingResult, map_from_dict, route


def arrivals_of(args: argparse.Namespace) -> BMAP:
    if args.arrivals is None:
        if args.arrival_rate is None:
            raise InputError("--arrival-rate", "is missing", "give --arrival-rate L (Poisson) or --arrivals MAP.yaml")
        return BMAP.poisson(args.arrival_rate, field="--arrival-rate")
    doc = load_yaml(args.arrivals)
    if isinstance(doc, dict) and set(doc) == {"arrivals"}:
        doc = doc["arrivals"]
    try:
        bmap = map_from_dict(doc, field=args.arrivals)
    except InputError as exc:
        raise exc.within("--arrivals") from exc
    if args.arrival_rate is not None:
        bmap = bmap.scaled(args.arrival_rate / bmap.rate)
    return bmap


def render(res: RoutingResult, arrivals: BMAP, rates: tuple[float, ...]) -> str:
    kind = "Poisson" if arrivals.order == 1 else f"MAP of order {arrivals.order}"
    lines = [f"arrivals: {kind}, {arrivals.rate:.6g} per second; servers: "
             + ", ".join(f"{i + 1}: rate {r:g}" for i, r in enumerate(rates))
             + " (exponential, no buffer, an arrival preempts)"]
    if not res.sequence:
        lines.append(res.message)
        return "\n".join(lines)
    lines.append(f"best periodic sequence (period {len(res.sequence)}): " + " ".join(str(s + 1) for s in res.sequence))
    lines.append(f"fraction lost g = {res.cost:.6g}  ({res.cost * arrivals.rate:.6g} packets per second)")
    lines.append(f"method: {res.message}")
    if res.by_period:
        lines.append("best cost by period: " + ", ".join(f"{n}: {c:.6g}" for n, c in res.by_period))
    return "\n".join(lines)


def run_route(args: argparse.Namespace) -> int:
    arrivals = arrivals_of(args)
    res = route(arrivals, args.service_rates, max_period=args.max_period, method=args.method, certify=args.certify)
    if args.json:
        print(json_text(res.to_dict(arrivals.rate), indent=2))
    else:
        print(render(res, arrivals, args.service_rates))
    return 0 if res.success else 1
