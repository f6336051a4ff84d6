"""``robotctl solve`` and ``robotctl optimise``: what they run (imported when one of them runs)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from robotctl._json import finite, json_text
from robotctl.agent import check_solve_memory, load_model_file
from robotctl.model import (
    ApproxSolution,
    CostBreakdown,
    Costs,
    HysteresisPolicy,
    InputError,
    Measures,
    QueueLengthPolicy,
    QueueModel,
    cost_of,
    solve,
    solve_approx,
    solve_hysteresis,
)
from robotctl.policies import (
    EXHAUSTIVE_LIMIT,
    PARALLEL_POLICIES,
    HysteresisPoint,
    LocalOptimum,
    LowerBound,
    PolicySearch,
    ThresholdOptimum,
    count_policies,
    mdp_lower_bound,
    optimise,
    optimise_hysteresis,
)

from ._progress import Progress
from ._run_buffers import run_solve_buffer

# -- output -----------------------------------------------------------------------------------

def measures_json(m: Measures) -> dict[str, Any]:
    d = m.to_dict()
    d["throughput"] = m.throughput
    return {k: (finite(v) if isinstance(v, float) else v) for k, v in d.items()}


def _measure_lines(m: Measures, c: CostBreakdown) -> list[str]:
    dist = ", ".join(f"{r}: {p:.4f}" for r, p in m.active_robots_distribution)
    return [
        f"  offered rate lambda        {m.arrival_rate:.6g} pages/s",
        f"  P_loss                     {m.p_loss:.6f}",
        f"  P_obsolete                 {m.p_obsolete:.6f}",
        f"  P_success                  {m.p_success:.6f}",
        f"  P_starvation               {m.p_starvation:.6f}",
        f"  mean active robots         {m.mean_active_robots:.6f}   ({dist})",
        f"  mean queue length          {m.mean_queue_length:.6f}",
        f"  mean response (served)     {m.mean_response_served:.6g} s",
        f"  mean sojourn (obsolete)    {m.mean_sojourn_obsolete:.6g} s",
        *([f"  commands/robot/min         {m.commands_per_robot_min:.6g}   (park + resume; "
           f"{m.commands_per_s:.6g} per second)"] if m.commands_per_robot_min == m.commands_per_robot_min else []),
        f"cost J = {c.total:.6g}   (loss {c.loss:.4g}, obsolescence {c.obsolescence:.4g}, "
        f"response {c.response:.4g}, robots {c.robot:.4g}, starvation {c.starvation:.4g}"
        + (f", commands {c.command:.4g})" if c.command else ")"),
    ]


def _describe_policy(policy: QueueLengthPolicy) -> str:
    modes = policy.modes
    if len(modes) == 1:
        return f"robots_at_level {policy}   ({modes[0]} robots always)"
    if not policy.is_monotone:
        return f"robots_at_level {policy}   (modes {', '.join(map(str, modes))}; not monotone: no thresholds)"
    js = ",".join(str(j) for j in policy.as_threshold().thresholds)
    return f"robots_at_level {policy}   (modes {' > '.join(map(str, modes))}, thresholds {js})"


def _evaluation_line(method: str, exact: bool, bound: float, lower: float | None) -> str:
    """The output contract's method, error bound and lower bound, in words."""
    if exact:
        text = "evaluation: exact (error bound 0)"
    else:
        text = f"evaluation: {method} approximation, cost within +-{bound:.3g} (measured error bar)"
    if lower is None:
        return text + "; MDP lower bound not computed (--certify computes it)"
    return text + f"; MDP lower bound {lower:.6g}"


def _hysteresis_policy(args: argparse.Namespace) -> HysteresisPolicy | None:
    """--park/--resume as a HysteresisPolicy (None with --policy); InputError naming the flag otherwise."""
    park, resume = getattr(args, "park", None), getattr(args, "resume", None)
    if args.policy is not None:
        if park is not None or resume is not None:
            raise InputError("--policy", "cannot be combined with --park/--resume",
                             "give --policy R0,...,RK for a threshold policy, or --park and --resume for hysteresis")
        return None
    if park is None and resume is None:
        raise InputError("--policy", "is missing", "give --policy 3,3,3,1,1,1, or --park 3,3,3,1,1,1 --resume "
                         "3,3,1,1,1,1 for a hysteresis policy")
    if park is None or resume is None:
        missing = "--park" if park is None else "--resume"
        raise InputError(missing, "is missing", "a hysteresis policy needs both --park and --resume (one robot "
                         "count per queue length 0..K each, resume <= park); --policy alone is the plain policy")
    try:
        return HysteresisPolicy.parse(park, resume)
    except InputError as exc:
        raise InputError(f"--{exc.field}", exc.problem, exc.hint) from exc


def _run_solve_hysteresis(args: argparse.Namespace, model: QueueModel, costs: Costs,
                          hyst: HysteresisPolicy) -> int:
    try:
        hyst.check(model)
        sol = solve_hysteresis(model, hyst)
    except InputError as exc:
        raise InputError(f"--{exc.field}" if exc.field.startswith(("park", "resume")) else exc.field,
                         exc.problem, exc.hint) from exc
    cost = cost_of(sol.measures, costs)
    success = sol.residual <= 1e-9
    if args.json:
        out = {
            "success": success, "method": "hysteresis", "park": list(hyst.park), "resume": list(hyst.resume),
            "robots_reachable": [list(r) for r in sol.robots_at_level],
            "commands_per_robot_min": finite(sol.commands_per_robot_min), "fleet": sol.fleet,
            "cost": finite(cost.total), "cost_terms": {k: finite(v) for k, v in cost.to_dict().items() if k != "total"},
            "measures": measures_json(sol.measures), "n_states": sol.n_states, "residual": finite(sol.residual),
        }
        print(json_text(out, indent=2))
    else:
        print(f"hysteresis policy: park {','.join(map(str, hyst.park))}   resume {','.join(map(str, hyst.resume))}")
        print(f"solver hysteresis (exact, robots in the state): {sol.n_states} states, residual "
              f"{sol.residual:.2g}, {sol.seconds * 1000:.1f} ms")
        print("\n".join(_measure_lines(sol.measures, cost)))
    return 0 if success else 1


def run_solve(args: argparse.Namespace) -> int:
    hyst = _hysteresis_policy(args)
    if hyst is None and (args.buffer != "timers" or args.q is not None or args.red is not None or args.with_timers):
        return run_solve_buffer(args)  # renovation, RED or no rule (paper 004): robotctl/cli/_run_buffers.py
    if hyst is not None and (args.buffer != "timers" or args.q is not None or args.red is not None
                             or args.with_timers or args.approx):
        raise InputError("--park", "hysteresis policies are solved with obsolescence timers only, exactly",
                         "drop --buffer/--q/--red/--with-timers/--approx, or use --policy")
    model, costs = load_model_file(args.model_file)
    if hyst is not None:
        check_solve_memory(model, field=f"{args.model_file}: model.capacity")
        return _run_solve_hysteresis(args, model, costs, hyst)
    check_solve_memory(model, field=f"{args.model_file}: model.capacity", approx=args.approx)
    model.check_policy(args.policy)
    if args.approx:
        return _run_solve_approx(args, solve_approx(model, args.policy, costs, rtol=args.tol), costs)
    sol = solve(model, args.policy, method=args.method)
    cost = cost_of(sol.measures, costs)
    if args.json:
        out = {
            "success": sol.success, "message": sol.message, "method": sol.method,
            "robots_at_level": list(args.policy.robots_at_level), "modes": list(args.policy.modes),
            "thresholds": list(args.policy.thresholds), "cost": finite(cost.total),
            "commands_per_robot_min": finite(sol.measures.commands_per_robot_min),
            "cost_terms": {k: finite(v) for k, v in cost.to_dict().items() if k != "total"},
            "measures": measures_json(sol.measures), "n_states": sol.n_states, "residual": finite(sol.residual),
            "exact": sol.method != "approx", "error_bound": finite(sol.error_bound),
            "measure_errors": {k: finite(v) for k, v in sol.measure_errors.items()},
            "budget_exhausted": sol.budget_exhausted,
        }
        print(json_text(out, indent=2))
    else:
        print(_describe_policy(args.policy))
        print(f"solver {sol.method}: {sol.message}; {sol.n_states} states, residual {sol.residual:.2g}, "
              f"{sol.seconds * 1000:.1f} ms")
        if sol.method == "approx":
            print(f"evaluation: approximation, every measure within +-{sol.error_bound:.3g} (measured error bar)"
                  + ("; the time budget ran out before the tolerance was met" if sol.budget_exhausted else ""))
        print("\n".join(_measure_lines(sol.measures, cost)))
    return 0 if sol.success else 1


def _run_solve_approx(args: argparse.Namespace, sol: ApproxSolution, costs: Any) -> int:
    cost = cost_of(sol.measures, costs)
    if args.json:
        out = {
            "success": sol.success, "status": sol.status.name.lower(), "message": sol.message,
            "method": sol.method, "exact": sol.exact, "error_bound": finite(sol.error_bound), "h": sol.h,
            "robots_at_level": list(args.policy.robots_at_level), "cost": finite(cost.total),
            "cost_terms": {k: finite(v) for k, v in cost.to_dict().items() if k != "total"},
            "measures": measures_json(sol.measures),
            "measure_errors": {k: finite(v) for k, v in sol.measure_errors.items()},
            "n_states": sol.n_states, "reduction": list(sol.reduction), "budget_exhausted": sol.budget_exhausted,
            "ladder": [{"h": st.h, "states": st.n_states, "cost": finite(st.cost), "seconds": st.seconds}
                       for st in sol.ladder],
        }
        print(json_text(out, indent=2))
    else:
        print(_describe_policy(args.policy))
        print(f"{sol.message}; {sol.n_states} states, {sol.seconds:.2f} s")
        print(_evaluation_line(sol.method, sol.exact, sol.error_bound, None))
        if sol.budget_exhausted:
            print(f"the time budget ran out: the error bar is above the tolerance {args.tol:g}")
        print("\n".join(_measure_lines(sol.measures, cost)))
    return 0 if sol.success else 1


def _optimum_json(o: ThresholdOptimum) -> dict[str, Any]:
    return {"modes": list(o.modes), "thresholds": list(o.thresholds),
            "robots_at_level": list(o.policy.robots_at_level), "cost": finite(o.cost.total),
            "search": o.search_method, "exhaustive": o.exact}


def _queue_length_json(q: LocalOptimum) -> dict[str, Any]:
    return {"robots_at_level": list(q.policy.robots_at_level), "cost": finite(q.cost), "monotone": q.monotone,
            "chain": q.chain, "evaluations": q.evaluations}


def _workers(args: argparse.Namespace) -> tuple[Any, Any]:
    """A process pool (one BLAS thread per process: the environment set by the CLI is inherited) and its
    map, or (None, None) for one process."""
    import os

    cpus = os.cpu_count() or 1
    n = min(args.workers, cpus) if args.workers is not None else cpus  # more processes than CPUs only thrash
    if n <= 1:
        return None, None
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=n)
    return pool, pool.map


def _table(search: PolicySearch) -> list[str]:
    lines = [f"{'active robots (modes)':<24}{'thresholds':<14}{'robots_at_level':<22}{'cost J':>10}"]
    for o in search.subsets:
        modes = " or ".join(map(str, o.modes))
        js = ",".join(map(str, o.thresholds)) or "-"
        flag = "" if o.exact else "  (local search)"
        lines.append(f"{modes:<24}{js:<14}{o.policy!s:<22}{o.cost.total:>10.3f}{flag}")
    return lines


def run_optimise(args: argparse.Namespace) -> int:
    from ._run_targets import run_targets, targets_given  # targets instead of weights

    hysteresis = (getattr(args, "hysteresis", False) or getattr(args, "commands_curve", False)
                  or getattr(args, "max_commands_per_robot_min", None) is not None)
    if targets_given(args):
        if hysteresis:
            raise InputError("--max-commands-per-robot-min", "hysteresis searches take no --max-loss, "
                             "--max-obsolete or --max-starvation",
                             "drop those targets, or drop --hysteresis/--commands-curve/--max-commands-per-robot-min")
        return run_targets(args)
    model, costs = load_model_file(args.model_file)
    if costs == Costs():
        raise InputError(f"{args.model_file}: costs", "are missing (or all zero), so every policy costs J = 0",
                         "add a costs: mapping (robotctl fit --costs FILE or --config SIDECAR.yaml writes one)")
    if args.policy_kind == "mdp" or args.method == "mdp":
        from ._run_mdp import run_optimise_mdp

        return run_optimise_mdp(args, model, costs)
    check_solve_memory(model, field=f"{args.model_file}: model.capacity")
    if hysteresis or costs.command > 0:
        return _run_optimise_hysteresis(args, model, costs)
    pool = tuple(sorted(set(args.modes), reverse=True)) if args.modes else model.modes
    exhaustive = args.search == "exhaustive" or (
        args.search == "auto" and count_policies(len(pool), model.capacity) <= EXHAUSTIVE_LIMIT)
    total = count_policies(len(pool), model.capacity) if exhaustive else None
    large = total is None or total >= PARALLEL_POLICIES
    processes, workers = _workers(args) if large else (None, None)
    try:
        with Progress(total, "optimising") as bar:
            search = optimise(model, costs, modes=args.modes, method=args.search, solver_method=args.method,
                              progress=bar.advance, space=args.space, rtol=args.tol, max_seconds=args.max_seconds,
                              workers=workers)
    finally:
        if processes is not None:
            processes.shutdown()
    best = search.best
    queue_length = search.queue_length
    bound = _certify(args, model, costs)
    lower = bound.value if bound is not None else search.lower_bound
    if args.json:
        out: dict[str, Any] = {
            "success": search.success, "message": search.message,
            **_optimum_json(best),
            "cost_terms": {k: finite(v) for k, v in best.cost.to_dict().items() if k != "total"},
            "measures": measures_json(best.measures),
            "method": search.method, "error_bound": finite(search.error_bound), "exact": search.exact,
            "budget_exhausted": search.budget_exhausted, "lower_bound": lower, "monotone": best.policy.is_monotone,
            "search_exhaustive": best.exact, "search_chain": search.search_chain,
            "solver_method": best.solver_method, "policies_solved": search.policies_solved,
            "static": {str(r): finite(c.total) for r, c in search.static}, "static_walk": search.static_walk,
            "relative_profit_percent": finite(search.relative_profit),
            "reduction": list(search.reduction),
        }
        if queue_length is not None:
            out["queue_length_policy"] = _queue_length_json(queue_length)
        if args.all_subsets:
            out["subsets"] = [_optimum_json(o) for o in search.subsets]
        if bound is not None:
            from ._run_mdp import certify_json

            out.update(certify_json(bound, best.cost.total))
        print(json_text(out, indent=2))
        return 0 if search.success and (bound is None or bound.success) else 1
    if args.all_subsets:
        print("\n".join(_table(search)))
        print()
    static = ", ".join(f"C_{r} = {c.total:.6g}" for r, c in sorted(search.static))
    walk = " (the fleets walked to the best one on the search chain; the others were not costed)" \
        if search.static_walk else ""
    print(f"static fleets{walk}: {static}")
    print(f"optimum: {_describe_policy(best.policy)}")
    print("\n".join(_measure_lines(best.measures, best.cost)))
    print(_evaluation_line(search.method, search.exact, search.error_bound, lower))
    if search.budget_exhausted:
        print(f"the time budget (--max-seconds {args.max_seconds:g}) ran out: the error bar is above the tolerance "
              f"{args.tol:g}")
    how = "exhaustive search" if best.exact else "local search (a local optimum)"
    chain = "the exact chain" if search.search_chain == "exact" else f"the {search.search_chain} chain"
    print(f"relative profit R = {search.relative_profit:.2f}% over the best static fleet; "
          f"{search.policies_solved} policies costed on {chain} ({how})")
    if search.reduction:
        print(f"exact reductions: {'; '.join(search.reduction)}")
    if queue_length is not None:
        kind = "monotone" if queue_length.monotone else "NOT monotone"
        print(f"best queue-length policy ({kind}): robots_at_level {queue_length.policy}, "
              f"cost {queue_length.cost:.6g} on {queue_length.chain}")
    if bound is not None:
        from ._run_mdp import certify_lines

        print("\n".join(certify_lines(bound, best.cost.total)))
    if not search.success:
        print(f"warning: {search.message}", file=sys.stderr)
    return 0 if search.success and (bound is None or bound.success) else 1


def _point_json(p: HysteresisPoint) -> dict[str, Any]:
    return {"park": list(p.policy.park), "resume": list(p.policy.resume),
            "commands_per_robot_min": finite(p.commands_per_robot_min), "cost": finite(p.base_cost),
            "cost_with_commands": finite(p.cost.total)}


def _run_optimise_hysteresis(args: argparse.Namespace, model: QueueModel, costs: Costs) -> int:
    """optimise over hysteresis policies: --hysteresis, --commands-curve, --max-commands-per-robot-min, or
    costs.command > 0 (robotctl.policies.optimise_hysteresis)."""
    if getattr(args, "policy_kind", "thresholds") != "thresholds" or args.space != "monotone":
        raise InputError("--hysteresis", "the hysteresis search takes no --policy-kind mdp or --space all",
                         "drop them, or drop --hysteresis/--commands-curve/--max-commands-per-robot-min")
    budget = args.max_commands_per_robot_min
    with Progress(None, "optimising") as bar:
        plain = optimise(model, dataclasses.replace(costs, command=0.0), modes=args.modes, method=args.search,
                         progress=bar.advance, rtol=args.tol, max_seconds=args.max_seconds)
        search = optimise_hysteresis(model, costs, modes=args.modes, max_commands_per_robot_min=budget,
                                     start=plain.best.policy.robots_at_level, curve=args.commands_curve,
                                     method=args.search, progress=bar.advance)
    best = search.best
    lower = None
    if args.certify:  # paper 001's MDP with the switching cost (robotctl.policies._switching)
        from robotctl.policies import budget_lower_bound, switching_lower_bound

        lower = budget_lower_bound(model, costs, budget)[0] if budget is not None else \
            switching_lower_bound(model, costs).value
    gap = None if lower is None or lower <= 0 else 100.0 * (best.cost.total - lower) / lower
    if args.json:
        out: dict[str, Any] = {
            "success": search.within_budget, "method": "hysteresis", **_point_json(best),
            "lower_bound": finite(lower) if lower is not None else None,
            "gap_percent": finite(gap) if gap is not None else None,
            "cost": finite(best.cost.total),
            "cost_terms": {k: finite(v) for k, v in best.cost.to_dict().items() if k != "total"},
            "measures": measures_json(best.measures), "max_commands_per_robot_min": budget,
            "within_budget": search.within_budget, "search_exhaustive": search.exhaustive,
            "policies_solved": search.evaluated, "threshold": _point_json(search.threshold),
            "static": _point_json(search.static),
        }
        if args.commands_curve:
            out["curve"] = [_point_json(p) for p in search.curve]
        print(json_text(out, indent=2))
        return 0 if search.within_budget else 1
    if args.commands_curve:
        print(f"{'commands/robot/min':>20}{'cost J':>14}   park | resume")
        for p in search.curve:
            print(f"{p.commands_per_robot_min:>20.4f}{p.base_cost:>14.6g}   {','.join(map(str, p.policy.park))} | "
                  f"{','.join(map(str, p.policy.resume))}")
        print()
    how = "exhaustive over every (park, resume) pair" if search.exhaustive else "descent (a local optimum)"
    print(f"best static fleet: {search.static.policy.park[0]} robots, J = {search.static.cost.total:.6g}")
    print(f"best plain threshold policy: {','.join(map(str, search.threshold.policy.park))}, "
          f"J = {search.threshold.cost.total:.6g}, {search.threshold.commands_per_robot_min:.4g} commands/robot/min")
    budget_text = "" if budget is None else f" within {budget:g} commands/robot/min"
    print(f"optimum{budget_text}: park {','.join(map(str, best.policy.park))}")
    print(f"{' ' * len('optimum' + budget_text)}  resume {','.join(map(str, best.policy.resume))}")
    print("\n".join(_measure_lines(best.measures, best.cost)))
    print(f"{search.evaluated} policies costed exactly ({how})")
    if lower is not None:
        print(f"lower bound on every commanded fleet (paper 001's MDP with the switching cost, response term "
              f"bounded by a b_1): {lower:.6g}; the policy above is at most {gap:.2f}% above it")
    if not search.within_budget:
        print(f"warning: no policy found within {budget:g} commands/robot/min; shown: the one with fewest",
              file=sys.stderr)
    return 0 if search.within_budget else 1


def _certify(args: argparse.Namespace, model: QueueModel, costs: Costs) -> LowerBound | None:
    """``--certify``: the full-information MDP's lower bound (robotctl.policies.mdp_lower_bound)."""
    return mdp_lower_bound(model, costs) if args.certify else None


__all__ = ["measures_json", "run_optimise", "run_solve"]
