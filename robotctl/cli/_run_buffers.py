"""``robotctl buffers`` and ``robotctl solve --buffer ...``: what they run (imported when they run)."""

from __future__ import annotations

import argparse
from typing import Any

from robotctl._json import finite, json_text
from robotctl.agent import load_model_file
from robotctl.model import (
    BufferMeasures,
    BufferPolicy,
    Conflict,
    CostBreakdown,
    Costs,
    InputError,
    QueueModel,
    RedDrop,
    Renovation,
    ThresholdPolicy,
    buffer_cost,
    solve_buffer,
)
from robotctl.policies import BufferChoice, compare_buffers, optimise, optimise_red, optimise_renovation

from ._progress import Progress


def buffer_json(buffer: BufferPolicy) -> dict[str, Any]:
    ren, red = buffer.renovation, buffer.red
    return {"timers": buffer.timers,
            "renovation": None if ren is None else {"q": list(ren.q), "option": int(ren.conflict)},
            "red": None if red is None else {"drop": list(red.probabilities),
                                             "parameters": None if red.parameters is None else list(red.parameters)}}


def measures_json(m: BufferMeasures) -> dict[str, Any]:
    return {k: (finite(v) if isinstance(v, float) else v) for k, v in m.to_dict().items()}


def cost_terms(c: CostBreakdown) -> dict[str, float | None]:
    return {k: finite(v) for k, v in c.to_dict().items() if k != "total"}


def measure_lines(m: BufferMeasures, c: CostBreakdown) -> list[str]:
    return [
        f"  offered rate lambda        {m.arrival_rate:.6g} pages/s",
        f"  P_blocked                  {m.p_blocked:.6f}",
        f"  P_renovated                {m.p_renovated:.6f}   (of which stale {m.p_renovated_stale:.6f})",
        f"  P_red                      {m.p_red:.6f}",
        f"  P_expired (timers)         {m.p_expired:.6f}",
        f"  P_served                   {m.p_served:.6f}   (of which stale {m.p_served_stale:.6f})",
        f"  P_loss (lost fresh)        {m.p_loss:.6f}",
        f"  P_stale                    {m.p_stale:.6f}",
        f"  P_starvation               {m.p_starvation:.6f}",
        f"  mean active robots         {m.mean_active_robots:.6f}",
        f"  mean queue length          {m.mean_queue_length:.6f}   (second moment {m.second_moment_queue_length:.6g})",
        f"  mean response (served)     {m.mean_response_served:.6g} s",
        f"cost J = {c.total:.6g}   (loss {c.loss:.4g}, staleness {c.obsolescence:.4g}, response {c.response:.4g}, "
        f"robots {c.robot:.4g}, starvation {c.starvation:.4g})",
    ]


def _buffer_from_args(args: argparse.Namespace, model: QueueModel, costs: Costs, policy: ThresholdPolicy
                      ) -> tuple[BufferPolicy, str]:
    """The buffer policy the flags ask for, and how its parameters were found."""
    kind = args.buffer
    if args.q is not None and kind != "renovation":
        raise InputError("--q", "applies only with --buffer renovation", "add --buffer renovation or drop --q")
    if args.red is not None and kind != "red":
        raise InputError("--red", "applies only with --buffer red", "add --buffer red or drop --red")
    if args.with_timers and kind not in ("renovation", "red"):
        raise InputError("--with-timers", "applies only with --buffer renovation or red",
                         "timers are the default buffer rule already")
    if kind == "none":
        return BufferPolicy(False), "no rule"
    if kind == "renovation":
        if args.q is None:
            raise InputError("--q", "is required with --buffer renovation", "give e.g. --q 0.5,0.3,0.2, or --q best")
        if args.q == "best":
            with Progress(None, "searching q") as bar:
                found = optimise_renovation(model, costs, policy, timers=args.with_timers, progress=bar.advance)
            return found.best.buffer, found.best.search
        return BufferPolicy(args.with_timers, Renovation(args.q, Conflict(args.option))), "given"
    if args.red is None:
        raise InputError("--red", "is required with --buffer red", "give e.g. --red 2,5,0.3, or --red best")
    if args.red == "best":
        with Progress(None, "searching RED") as bar:
            choice = optimise_red(model, costs, policy, timers=args.with_timers, progress=bar.advance)
        return choice.buffer, choice.search
    lo, hi, p = args.red
    try:
        drop = RedDrop.linear(lo, hi, p, model.capacity)
    except InputError as exc:
        raise InputError(f"--red ({exc.field})", exc.problem, exc.hint) from exc
    return BufferPolicy(args.with_timers, None, drop), "given"


def run_solve_buffer(args: argparse.Namespace) -> int:
    """``robotctl solve MODEL.yaml --policy ... --buffer renovation|red|none ...``."""
    model, costs = load_model_file(args.model_file)
    model.check_policy(args.policy)
    buffer, found = _buffer_from_args(args, model, costs, args.policy)
    sol = solve_buffer(model, args.policy, buffer)
    cost = buffer_cost(sol.measures, costs)
    if args.json:
        out = {"success": sol.success, "message": sol.message, "method": sol.method,
               "robots_at_level": list(args.policy.robots_at_level), "modes": list(args.policy.modes),
               "thresholds": list(args.policy.thresholds), "buffer": buffer_json(buffer), "search": found,
               "cost": finite(cost.total), "cost_terms": cost_terms(cost), "measures": measures_json(sol.measures),
               "n_states": sol.n_states, "residual": finite(sol.residual)}
        print(json_text(out, indent=2))
    else:
        print(f"robots_at_level {args.policy}")
        print(f"buffer: {buffer}" + ("" if found == "given" else f"   ({found})"))
        print(f"solver {sol.method}: {sol.message}; {sol.n_states} states, residual {sol.residual:.2g}, "
              f"{sol.seconds * 1000:.1f} ms")
        print("\n".join(measure_lines(sol.measures, cost)))
    return 0 if sol.success else 1


def _parameters(c: BufferChoice) -> str:
    if c.name == "renovation" and c.buffer.renovation is not None:
        return str(c.buffer.renovation) + ("  (removes nothing)" if c.buffer.renovation.is_trivial else "")
    if c.name == "red" and c.buffer.red is not None:
        return str(c.buffer.red) + ("  (drops nothing)" if not any(c.buffer.red.probabilities) else "")
    return {"timers": "every waiting page's useful-life timer", "none": "stale pages stay and are indexed"}.get(
        c.name, "")


def run_buffers(args: argparse.Namespace) -> int:
    model, costs = load_model_file(args.model_file)
    policy, chosen = args.policy, "given"
    if policy is None:
        with Progress(None, "thresholds under timers") as bar:
            policy = optimise(model, costs, progress=bar.advance).best.policy
        chosen = "the optimum under timers"
    model.check_policy(policy)
    with Progress(None, "comparing") as bar:
        c = compare_buffers(model, costs, policy, grid=args.grid, tol=args.tol, red_levels=args.red_levels,
                            progress=bar.advance)
    timers = next((x for x in c.choices if x.name == "timers"), None)
    if args.json:
        out = {"success": c.success, "message": c.message, "robots_at_level": list(policy.robots_at_level),
               "policy": chosen, "best": c.best.name,
               "rules": [{"name": x.name, "parameters": _parameters(x), "buffer": buffer_json(x.buffer),
                          "cost": finite(x.cost.total), "cost_terms": cost_terms(x.cost),
                          "loss": x.measures.p_loss, "stale": x.measures.p_stale,
                          "starvation": x.measures.p_starvation, "response": finite(x.measures.mean_response_served),
                          "measures": measures_json(x.measures), "evaluations": x.evaluations, "search": x.search}
                         for x in c.choices]}
        print(json_text(out, indent=2))
        return 0 if c.success else 1
    print(f"robots_at_level {policy}   ({chosen}; the same for every rule)")
    print(f"{'rule':<12}{'loss':>8}{'stale':>8}{'starved':>9}{'response':>10}{'cost J':>10}   parameters")
    for x in c.choices:
        m = x.measures
        print(f"{x.name:<12}{m.p_loss:>8.4f}{m.p_stale:>8.4f}{m.p_starvation:>9.4f}{m.mean_response_served:>9.3f}s"
              f"{x.cost.total:>10.3f}   {_parameters(x)}")
    gain = ""
    if timers is not None and c.best.name != "timers" and timers.cost.total > 0:
        gain = f", {100 * (1 - c.best.cost.total / timers.cost.total):.1f}% below timers"
    print(f"cheapest: {c.best.name} (J = {c.best.cost.total:.6g}{gain})")
    print("loss: pages lost fresh (blocked, or dropped by RED or renovation before their useful life ended); "
          "stale: pages whose useful life ended in the buffer (expired, indexed stale or removed stale); "
          "starved: P(indexer idle); response: mean sojourn of indexed pages")
    searches = "; ".join(f"{x.name}: {x.search}, {x.evaluations} exact solves" for x in c.choices
                         if x.name in ("renovation", "red"))
    print(searches)
    if not c.success:
        print(f"warning: {c.message}")
    return 0 if c.success else 1


__all__ = ["buffer_json", "measure_lines", "measures_json", "run_buffers", "run_solve_buffer"]
