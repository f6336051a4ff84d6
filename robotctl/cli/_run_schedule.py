"""``robotctl schedule``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from robotctl._json import json_text
from robotctl.agent import Pages, load_fetch_law, read_pages
from robotctl.model import InputError
from robotctl.policies import FetchLaw, FrequencyMethod, RevisitPlan, plan_revisits


def fetch_law_of(arg: tuple[str, Any]) -> FetchLaw:
    """The law of ``--fetch-time`` as parsed by :func:`robotctl.cli._cmd_schedule.fetch_time`."""
    kind, value = arg
    try:
        if kind == "inline":
            return load_fetch_law(value)
        if kind == "samples":
            return load_fetch_law({"samples_file": value})
        return load_fetch_law(value)
    except InputError as exc:
        raise exc.within("--fetch-time") from exc


def pages_of(args: argparse.Namespace) -> Pages:
    if (args.pages is None) == (args.change_rates is None):
        raise InputError("PAGES.csv", "give either a page list or --change-rates", "e.g. --change-rates 0.5,1,2")
    if args.pages is not None:
        pages = read_pages(args.pages)
    else:
        rates = np.array(args.change_rates)
        pages = Pages(tuple(str(i + 1) for i in range(rates.size)), rates, None)
    if args.weights is not None:
        if pages.weights is not None:
            raise InputError("--weights", f"given, but {args.pages} has a weight column", "use one or the other")
        if len(args.weights) != len(pages.ids):
            raise InputError("--weights", f"has {len(args.weights)} values for {len(pages.ids)} pages",
                             "give one weight per page")
        pages = Pages(pages.ids, pages.change_rates, np.array(args.weights))
    return pages


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def render(plan: RevisitPlan, pages: Pages, show: int) -> str:
    weights = "the change rates (c_i = mu_i)" if pages.weights is None else "given"
    eq = "eq. 10" if plan.method is FrequencyMethod.CLOSED_FORM else "eq. 8"
    lines = [f"fetch time X: {plan.fetch.describe()}",
             f"pages: {len(pages.ids)}; weights: {weights}; frequencies by {plan.method.value} ({eq})", ""]
    tc = plan.template_cost
    width = max(4, *(len(i) for i in pages.ids[:50]))
    lines.append(f"{'page':<{width}}  {'change/s':>9}  {'weight':>8}  {'h_i':>8}  {'frequency':>9}  "
                 f"{'per cycle':>9}  {'stale':>7}  {'random f':>8}")
    for i, pid in enumerate(pages.ids):
        if i == 50 and len(pages.ids) > 52:
            lines.append(f"... {len(pages.ids) - 50} more pages (--json lists all)")
            break
        visits = "-" if tc is None else str(int(tc.visits[i]))
        lines.append(f"{pid:<{width}}  {plan.change_rates[i]:>9.4g}  {plan.weights[i]:>8.4g}  {plan.h[i]:>8.4g}  "
                     f"{plan.frequencies[i]:>9.4f}  {visits:>9}  {plan.stale_fraction[i]:>7.4f}  "
                     f"{plan.randomised.frequencies[i]:>8.4f}")
    lines.append("")
    if plan.lower_bound is not None:
        where = "Theorem 3.4" if plan.method is FrequencyMethod.CLOSED_FORM else "Theorem 3.3, problem 7"
        lines.append(f"lower bound C*                 {plan.lower_bound:.6g}   (no policy does better; {where})")
    else:
        lines.append("lower bound C*                 -   (correlated fetch times: the paper's bound needs i.i.d. ones)")
    if plan.template is not None and tc is not None:
        seq = " ".join(str(int(v) + 1) for v in plan.template[:show])
        more = " ..." if plan.template.size > show else ""
        gap = "" if plan.lower_bound is None else f" ({(tc.cost / plan.lower_bound - 1) * 100:.2f}% above C*)"
        lines.append(f"{plan.policy} cycle of {tc.length} fetches: {seq}{more}")
        lines.append(f"cycle cost (Lemma 3.1)         {tc.cost:.6g}{gap}")
    lines.append(f"randomised policy (Thm 4.1)    {plan.randomised.cost:.6g}" + (
        "   (served: each fetch drawn with the random f column)" if plan.template is None else ""))
    if plan.status.name != "OK":
        lines.append(f"note: {plan.message}")
    return "\n".join(lines)


def run_schedule(args: argparse.Namespace) -> int:
    pages = pages_of(args)
    law = fetch_law_of(args.fetch_time)
    plan = plan_revisits(pages.change_rates, law, pages.weights, policy=args.policy, max_length=args.max_length)
    if args.json:
        doc = plan.to_dict()
        doc["pages"] = list(pages.ids)
        print(json_text(doc, indent=2))
    else:
        print(render(plan, pages, args.show))
    return 0 if plan.success else 1
