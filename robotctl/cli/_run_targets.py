"""``robotctl optimise --max-loss ... --max-obsolete ... --max-starvation ...``: the policy of least robot
time that meets service targets (robotctl.policies.optimise_for_targets). Imported when it runs."""

from __future__ import annotations

import argparse
from typing import Any

from robotctl._json import finite, json_text
from robotctl.agent import check_solve_memory, load_model_file
from robotctl.model import InputError, cost_of
from robotctl.policies import (
    EXHAUSTIVE_LIMIT,
    MEASURE_OF,
    Targets,
    TargetSearch,
    count_policies,
    optimise_for_targets,
)

from ._progress import Progress
from ._run_model import _describe_policy, _measure_lines, measures_json

#: --search of `robotctl optimise` -> the targets search: the non-exhaustive one is the Lagrangian search
SEARCH_FOR_TARGETS = {"auto": "auto", "exhaustive": "exhaustive", "local": "lagrange"}
TARGET_FLAGS = ("max_loss", "max_obsolete", "max_starvation")


def targets_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, k, None) is not None for k in TARGET_FLAGS)


def _targets(args: argparse.Namespace) -> Targets:
    try:
        return Targets(**{k: getattr(args, k) for k in TARGET_FLAGS})
    except InputError as exc:
        flag = "--" + exc.field.removeprefix("targets.").replace("_", "-")
        raise InputError(flag, exc.problem, exc.hint) from exc


def target_lines(result: TargetSearch) -> list[str]:
    """One line per target: the bound, the policy's exact value, met or not."""
    out = []
    for (name, bound), (_, ok) in zip(result.targets.given, result.met, strict=True):
        attr, printed = MEASURE_OF[name]
        value = float(getattr(result.measures, attr))
        out.append(f"  {printed:<14}{value:.6f}  {'<=' if ok else '> '} {bound:g}   {'met' if ok else 'NOT MET'}")
    return out


def result_json(result: TargetSearch) -> dict[str, Any]:
    return {
        "success": result.success, "status": result.status.value, "message": result.message,
        "targets": result.targets.to_dict(), "met": dict(result.met),
        "robots_at_level": list(result.policy.robots_at_level), "modes": list(result.policy.modes),
        "thresholds": list(result.policy.thresholds), "measures": measures_json(result.measures),
        "best_possible": {b.target: {"measure": b.measure, "value": b.value,
                                     "robots_at_level": list(b.policy.robots_at_level)}
                          for b in result.best_possible},
        "search": result.search_method, "exact": result.exact, "policies_solved": result.policies_solved,
        "failures": result.failures, "multipliers": dict(result.multipliers), "rounds": result.rounds,
        "solver_method": result.solver_method,
    }


def run_targets(args: argparse.Namespace) -> int:
    targets = _targets(args)
    if getattr(args, "all_subsets", False):
        raise InputError("--all-subsets", "does not apply with --max-loss/--max-obsolete/--max-starvation",
                         "drop one or the other")
    model, costs = load_model_file(args.model_file)
    check_solve_memory(model, field=f"{args.model_file}: model.capacity")
    pool = tuple(sorted(set(args.modes), reverse=True)) if args.modes else model.modes
    method = SEARCH_FOR_TARGETS[args.search]
    n = count_policies(len(pool), model.capacity)
    exhaustive = method == "exhaustive" or (method == "auto" and n <= EXHAUSTIVE_LIMIT)
    with Progress(n if exhaustive else None, "searching") as bar:
        result = optimise_for_targets(model, targets, modes=args.modes, method=method,
                                      solver_method=args.method, progress=bar.advance)
    cost = cost_of(result.measures, costs)
    if args.json:
        out = result_json(result)
        out["cost"] = finite(cost.total)
        print(json_text(out, indent=2))
        return 0 if result.success else 1
    bounds = ", ".join(f"{MEASURE_OF[name][1]} <= {bound:g}" for name, bound in targets.given)
    how = (f"exhaustive over {result.policies_solved} policies" if result.exact
           else f"{result.search_method} search, {result.rounds} rounds, {result.policies_solved} policies "
                f"solved; not exhaustive")
    print(f"targets: {bounds}")
    print(f"{result.message} ({how})")
    label = "policy" if result.success else "closest policy"
    print(f"{label}: {_describe_policy(result.policy)}")
    print("\n".join(target_lines(result)))
    print(f"robot time N_act = {result.measures.mean_active_robots:.6f} (mean active robots)")
    print("\n".join(_measure_lines(result.measures, cost)))
    return 0 if result.success else 1


__all__ = ["SEARCH_FOR_TARGETS", "TARGET_FLAGS", "result_json", "run_targets", "target_lines", "targets_given"]
