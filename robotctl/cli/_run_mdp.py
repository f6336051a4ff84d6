"""``robotctl mdp``, ``robotctl optimise --policy-kind mdp`` and ``--certify``: what they run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from robotctl._json import finite, json_text
from robotctl.model import Costs, QueueModel
from robotctl.policies import DynamicOptimum, LowerBound, RobotsProblem, mdp_lower_bound, solve_dynamic


# -- paper 001 ----------------------------------------------------------------------------------
def dynamic_json(opt: DynamicOptimum) -> dict[str, Any]:
    """The JSON of ``robotctl mdp`` (issue 14's keys, plus success, message and the robots' range)."""
    departure, arrival = opt.policy.switching_curves()
    return {
        "success": opt.success, "message": opt.message,
        "cost": finite(opt.cost), "p_starvation": opt.p_starvation, "loss_rate": opt.loss_rate,
        "mean_active_robots": opt.mean_active_robots,
        "active_robots": {"min": opt.active_range[0], "max": opt.active_range[1]},
        "switching_curves": {"departure": list(departure), "arrival": list(arrival)},
        "static": {"robots": opt.static.robots, "cost": opt.static.cost},
        "gain_percent": finite(opt.gain_percent), "iterations": opt.iterations,
        "method": opt.method, "evaluations": opt.evaluations,
    }


def dynamic_lines(opt: DynamicOptimum) -> list[str]:
    p = opt.problem
    departure, arrival = opt.policy.switching_curves()
    width = max(4, *(len(str(x)) + 1 for x in (*departure, *arrival) if x is not None))
    qs = "".join(f"{q:>{width}}" for q in range(p.capacity + 1))
    dep = "".join(f"{'-' if x is None else x:>{width}}" for x in departure)
    arr = "".join(f"{x:>{width}}" for x in arrival)
    shape = "" if opt.policy.is_switching_curve(opt.recurrent) else \
        "  (not a switching curve on every recurrent state: the curves give the largest r with action 1)"
    lo, hi = opt.active_range
    return [
        f"optimal dynamic policy: {opt.method.replace('-', ' ')} ({opt.evaluations} policy evaluations, "
        f"{opt.iterations} Bellman steps; {opt.message}); cost from the policy's own chain",
        f"  cost C_d                 {opt.cost:.6g}   (gamma P(starvation) + loss rate"
        f"{' + robot cost' if p.robot_cost else ''})",
        f"  P(starvation)            {opt.p_starvation:.6f}",
        f"  loss rate                {opt.loss_rate:.6g} pages/s",
        f"  active robots            mean {opt.mean_active_robots:.4f}, between {lo} and {hi}",
        f"switching curves{shape}",
        f"  {'pages before the event q':<36}{qs}",
        f"  {'completion: wake one iff active <=':<36}{dep}",
        f"  {'delivery: keep it iff active <=':<36}{arr}",
        f"best static fleet: {opt.static.robots} robots always active, C_s = {opt.static.cost:.6g}",
        f"gain of dynamic control: {opt.gain_percent:.2f}%   (100 (C_s - C_d) / C_d)",
    ]


def run_mdp(args: argparse.Namespace) -> int:
    problem = RobotsProblem.paper(args.robots, args.capacity, args.arrival_rate, args.service_rate, args.gamma)
    opt = solve_dynamic(problem)
    if args.json:
        print(json_text(dynamic_json(opt), indent=2))
    else:
        print(f"paper 001: N = {args.robots} robots of {args.arrival_rate:g} pages/s each, K = {args.capacity}, "
              f"mu = {args.service_rate:g}, gamma = {args.gamma:g}")
        print("\n".join(dynamic_lines(opt)))
    return 0 if opt.success else 1


def run_optimise_mdp(args: argparse.Namespace, model: QueueModel, costs: Costs) -> int:
    """``robotctl optimise MODEL.yaml --policy-kind mdp``: paper 001's MDP on a Poisson/exponential model file."""
    problem = RobotsProblem.from_model(model, costs)
    if args.modes or args.all_subsets or args.search != "auto":
        print("robotctl: warning: --modes, --all-subsets and --search steer the threshold search; "
              "--policy-kind mdp ignores them", file=sys.stderr)
    opt = solve_dynamic(problem)
    bound = mdp_lower_bound(model, costs) if args.certify else None
    if args.json:
        out = {"policy_kind": "mdp", "control": "mdp", **dynamic_json(opt)}  # control: deprecated, policy_kind
        if bound is not None:
            out.update(certify_json(bound, opt.cost))
        print(json_text(out, indent=2))
    else:
        print(f"paper 001's dynamic control: modes {problem.min_robots}..{problem.robots} robots, "
              f"K = {problem.capacity}, mu = {problem.service_rate:g}; cost = {costs.loss:g} x loss rate + "
              f"{costs.starvation:g} x P(starvation) + {costs.robot:g} x active robots")
        print("\n".join(dynamic_lines(opt)))
        if bound is not None:
            print("\n".join(certify_lines(bound, opt.cost, "the dynamic policy")))
    return 0 if opt.success and (bound is None or bound.success) else 1


# -- the certificate ----------------------------------------------------------------------------
MEANING = ("no policy that sets the number of active robots from the queue length (threshold or not), "
           "nor any policy that sees the arrival, service and obsolescence phases too, can cost less")


def certify_json(bound: LowerBound, cost: float) -> dict[str, Any]:
    return {
        "lower_bound": finite(bound.value),
        "gap_percent": finite(bound.gap_percent(cost)),
        "certificate": {
            "meaning": MEANING, "success": bound.success, "message": bound.message,
            "formulation": bound.formulation, "exact_state": bound.exact_state, "response": bound.response,
            "mdp_upper": finite(bound.upper), "n_states": bound.n_states, "n_actions": bound.n_actions,
        },
    }


def certify_lines(bound: LowerBound, cost: float, what: str = "the threshold optimum") -> list[str]:
    relaxed = "" if bound.exact_state else " (a relaxation: the order of waiting pages is forgotten)"
    response = {"none": "", "exact": "", "service-time": "; response term bounded by the mean service time"}
    return [
        f"lower bound {bound.value:.6g}: {MEANING} on this model.",
        f"  {what} costs {cost:.6g}, at most {bound.gap_percent(cost):.2f}% above it (gap_percent);",
        f"  full-information MDP: {bound.formulation} state, {bound.n_states} states x {bound.n_actions} "
        f"actions{relaxed}{response[bound.response]}; its best policy costs {bound.upper:.6g} ({bound.message})",
    ]


__all__ = ["certify_json", "certify_lines", "dynamic_json", "dynamic_lines", "run_mdp", "run_optimise_mdp"]
