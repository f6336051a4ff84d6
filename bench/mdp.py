"""Benchmark of the MDP layer (issue 14), measured side by side in one run.

1. Paper 001's relative value iteration for N = 16, 64, 160 robots and K = 5..50 (lambda = 1.6 / N, so
   the whole fleet offers 1.6 times the service rate mu = 1; gamma = 1): states, iterations, time, time
   per iteration against the N = 16, K = 5 baseline, and the error of the iteration's estimate (midpoint
   of Odoni's bracket) against the exact cost of its policy from the policy's own chain; the best static
   fleet and the gain.
2. The certificate (full-information MDP lower bound): paper 000's example at K = 5 and at K = 50, the
   same with a two-phase obsolescence law that does not reduce (exact ordered state at K = 5 and 7, the
   counts relaxation at K = 50), and a 16-robot, K = 50 random model with two-phase obsolescence (issue
   13's size): states, actions, time, the bound, the cost of the best threshold policy found, and the gap.

   Each row is solved twice: by policy iteration (the default: exact sparse evaluations, certified by the
   same bracket) and by value iteration alone; the Bellman steps, evaluations and times of both, and the
   difference between their costs.
3. One value-iteration step at N = 500, K = 200 (302k states), preallocated (the solver's loop) against the
   previous allocating loop, side by side; then the whole solve by policy iteration against the 30 s target
   (wall and CPU time, with the load average: the machine may be shared); with --full also by value
   iteration alone (minutes), and the two policies' exact costs.

Usage: python bench/mdp.py [--quick] [--full] [--only-step]
   (--quick: N = 16 and 64, K <= 20; certificate at K = 5 only)
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robotctl.agent import load_model_file
from robotctl.model import PH, Costs, QueueModel, random_model
from robotctl.policies import DynamicOptimum, RobotsProblem, mdp_lower_bound, optimise, solve_dynamic

ROOT = Path(__file__).resolve().parents[1]
TWO_PHASES = PH(np.array([0.3, 0.7]), np.array([[-0.6, 0.4], [0.1, -0.5]]))


def value_iteration(quick: bool) -> None:
    print("== 1. paper 001: policy iteration against relative value iteration (lambda = 1.6 / N, mu = 1, gamma = 1)")
    print(f"   {'N':>4} {'K':>3} {'states':>7} {'PI steps':>8} {'evals':>5} {'PI s':>7} {'VI iter':>7} {'VI s':>7} "
          f"{'us/it/st':>8} {'cost C_d':>10} {'|PI - VI|':>9} {'|est - exact|':>13} {'robots':>8} {'static':>10} "
          f"{'gain %':>9}")
    for N in (16, 64) if quick else (16, 64, 160):
        for K in (5, 10, 20) if quick else (5, 10, 20, 50):
            problem = RobotsProblem.paper(N, K, 1.6 / N, 1.0, 1.0)
            start = time.perf_counter()
            opt = solve_dynamic(problem)
            pi_s = time.perf_counter() - start
            start = time.perf_counter()
            vi = solve_dynamic(problem, method="value-iteration")
            seconds = time.perf_counter() - start
            states = (K + 1) * (N + 1) * 3
            per = seconds / vi.iterations / states * 1e6
            estimate = 0.5 * sum(opt.value_bounds)
            lo, hi = opt.active_range
            flag = "" if opt.success and vi.success else f"  ({opt.message}; {vi.message})"
            print(f"   {N:>4} {K:>3} {states:>7} {opt.iterations:>8} {opt.evaluations:>5} {pi_s:>7.3f} "
                  f"{vi.iterations:>7} {seconds:>7.3f} {per:>8.4f} {opt.cost:>10.6f} {abs(opt.cost - vi.cost):>9.1e} "
                  f"{abs(estimate - opt.cost):>13.2e} {f'{lo}..{hi}':>8} {opt.static.cost:>10.6f} "
                  f"{opt.gain_percent:>9.4g}{flag}")


def _allocating_iterations(problem: RobotsProblem, iterations: int) -> float:
    """Seconds for ``iterations`` steps of the previous loop (a new array for every temporary), for the
    side-by-side ratio of section 3."""
    from robotctl.policies._mdp import _bellman, _feasible

    p = problem
    K, N, mu, nu = p.capacity, p.robots, p.service_rate, p.uniformisation_rate
    lam = np.array(p.rates)
    ok = _feasible(K, N, p.min_robots)
    q, r = np.arange(K + 1), np.arange(N + 1)
    cost = np.zeros((K + 1, N + 1, 3))
    cost += (p.gamma * (q == 0))[:, None, None] + p.robot_cost * r[None, :, None]
    cost[K, :, 1] += nu * p.loss_cost
    h = np.zeros_like(cost)
    start = time.perf_counter()
    for _ in range(iterations):
        Th, _a, _k = _bellman(h, cost, lam, mu, nu, p.min_robots)
        diff = (Th - h)[ok]
        float(diff.min()), float(diff.max()), float(np.abs(Th[ok]).max())
        h = (1.0 - 0.99999) * h + 0.99999 * (Th - Th[K, N, 2])
        h[~ok] = 0.0
    return time.perf_counter() - start


def iteration_cost(full: bool) -> None:
    """Section 3: one value-iteration step at N = 500, K = 200, preallocated against allocating."""
    from robotctl.policies._mdp import policy_cost, relative_value_iteration

    print("== 3. N = 500, K = 200 (target: the whole solve within 30 s)")
    problem = RobotsProblem.paper(500, 200, 1.6 / 500, 1.0, 1.0)
    steps = 300
    old = _allocating_iterations(problem, steps)
    start = time.perf_counter()
    relative_value_iteration(problem, max_iterations=steps)
    new = time.perf_counter() - start
    print(f"   {steps} steps: preallocated {1000 * new / steps:.2f} ms/step, allocating {1000 * old / steps:.2f} "
          f"ms/step ({old / new:.2f}x)")
    solves: list[tuple[str, Callable[[RobotsProblem], DynamicOptimum]]] = [("policy-iteration", solve_dynamic)]
    if full:
        solves.append(("value-iteration", lambda pr: solve_dynamic(pr, method="value-iteration")))
    best: DynamicOptimum | None = None
    for name, solver in solves:
        load = os.getloadavg()[0]
        start, cpu = time.perf_counter(), time.process_time()
        opt = solver(problem)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"   whole solve by {name}: {opt.evaluations} evaluations, {opt.iterations} Bellman steps, "
              f"{seconds:.1f} s wall, {cpu:.1f} s CPU (load average {load:.1f} -> {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs): target {'met' if seconds <= 30 else 'NOT met'} on the wall clock, "
              f"{'met' if cpu <= 30 else 'NOT met'} in CPU; bracket [{opt.value_bounds[0]:.3g}, "
              f"{opt.value_bounds[1]:.3g}], exact cost {opt.cost:.3g}, peak RSS {rss_mb():.0f} MB ({opt.message})")
        best = opt if name == "policy-iteration" else best
    if full and best is not None:
        same = (np.array_equal(best.policy.activate, opt.policy.activate)
                and np.array_equal(best.policy.keep, opt.policy.keep))
        print(f"   the two policies are {'identical' if same else 'different'}; exact costs {best.cost:.3g} "
              f"(policy iteration) and {policy_cost(problem, opt.policy).cost:.3g} (value iteration): both at the "
              "rounding floor of this problem, whose optimal cost is 0 to double precision")


def rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def certificate(quick: bool) -> None:
    print("== 2. certificate: lower bound on every policy from the full-information MDP")
    print("   (threshold: the best threshold policy by robotctl.policies.optimise, where the exact solver reaches;")
    print("   the paper example's obsolescence law has equal exit rates, so it is solved as the exact exponential")
    print("   law of rate 0.2 there; with two phases that do not reduce, K = 50 is beyond the exact solver)")
    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    exponential = dataclasses.replace(model, obsolescence=PH.exponential(0.2))
    two = dataclasses.replace(model, obsolescence=TWO_PHASES)
    Case = tuple[str, QueueModel, Costs, str, QueueModel | None]
    cases: list[Case] = [("paper example, K = 5", model, costs, "auto", exponential)]
    if not quick:
        big = random_model(np.random.default_rng(1), capacity=50, modes=tuple(range(1, 17)), max_batch=2)
        cases += [
            ("paper example, K = 50", dataclasses.replace(model, capacity=50), costs, "auto",
             dataclasses.replace(exponential, capacity=50)),
            ("two-phase obsolescence, K = 5", two, costs, "ordered", two),
            ("two-phase obsolescence, K = 5", two, costs, "counts", two),
            ("two-phase obsolescence, K = 7", dataclasses.replace(two, capacity=7), costs, "ordered",
             dataclasses.replace(two, capacity=7)),
            ("two-phase obsolescence, K = 50", dataclasses.replace(two, capacity=50), costs, "counts", None),
            ("16 robots, K = 50, random, 2-phase obs.", big,
             Costs(loss=2, obsolescence=3, response=1, robot=1, starvation=30), "auto", None),
        ]
    print(f"   {'model':<40} {'form':<8} {'states':>7} {'acts':>5} {'solves':>6} {'time s':>7} {'bound':>10} "
          f"{'MDP best':>10} {'threshold':>10} {'search':>15} {'gap %':>7}  response")
    for name, m, c, form, searched in cases:
        start = time.perf_counter()
        bound = mdp_lower_bound(m, c, formulation=form)
        seconds = time.perf_counter() - start
        best_text, search_text, gap_text = "-", "-", "-"
        if searched is not None:
            start = time.perf_counter()
            search = optimise(searched, c)
            search_s = time.perf_counter() - start
            best = search.best.cost.total
            kind = "exhaustive" if search.best.exact else "local"
            best_text, search_text = f"{best:.4f}", f"{kind} {search_s:.1f}s"
            gap_text = f"{bound.gap_percent(best):.2f}"
        flag = "" if bound.success else f"  ({bound.message})"
        print(f"   {name:<40} {bound.formulation:<8} {bound.n_states:>7} {bound.n_actions:>5} {bound.solves:>6} "
              f"{seconds:>7.2f} {bound.value:>10.4f} {bound.upper:>10.4f} {best_text:>10} {search_text:>15} "
              f"{gap_text:>7}  {bound.response}{flag}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller grid")
    parser.add_argument("--full", action="store_true",
                        help="also the whole N = 500, K = 200 solve by value iteration alone (minutes)")
    parser.add_argument("--only-step", action="store_true", help="only section 3")
    args = parser.parse_args()
    if args.only_step:
        iteration_cost(args.full)
        return 0
    value_iteration(args.quick)
    iteration_cost(args.full)
    certificate(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
