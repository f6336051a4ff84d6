"""Revisit scheduling (paper 002) and open-loop routing (paper 003): how close the golden-ratio cycle
comes to the lower bound C* as the number of pages grows, printed next to the paper's bound 2 phi^2 / 5,
its H(q) and the corrected worst case; the time to plan N pages; and the routing searches' time and
agreement (local search, enumeration and the MDP measured in the same run).

Run: .venv/bin/python bench/revisit.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # noqa: E402

from robotctl.model import BMAP, PH  # noqa: E402
from robotctl.policies import (  # noqa: E402
    GOLDEN_RATIO_BOUND,
    FetchLaw,
    golden_asymptotic_ratio,
    golden_limit_cost,
    golden_worst_ratio,
    mmpp,
    optimal_frequencies,
    plan_revisits,
    route,
)


def sweep(sizes: list[int]) -> None:
    """C(cycle) / C* for heterogeneous rates (uniform on [0.5, 1.5]) and equal rates, total mu fixed."""
    law = FetchLaw.exponential(1.0)
    print("golden-ratio cycle over the lower bound C* (X exponential, mean 1 s; q = mu E[X])")
    print(f"  paper's bound 2 phi^2/5 = {GOLDEN_RATIO_BOUND:.4f}")
    for q in (0.1, 1.0):
        worst, s_star = golden_worst_ratio(q)
        print(f"  q = {q}: paper's H(q) = {float(golden_asymptotic_ratio(q)):.4f}, corrected worst case "
              f"max_s R(s, q) = {worst:.4f} (s = {s_star:.2f})")
        print(f"  {'N':>6}  {'uniform: cycle':>14}  {'limit k->inf':>12}  {'equal: cycle':>12}  {'limit':>7}  "
              f"{'cycle len':>9}  {'plan s':>7}")
        rng = np.random.default_rng(11)
        for N in sizes:
            mu = rng.uniform(0.5, 1.5, N)
            mu *= q / mu.sum()
            t0 = time.perf_counter()
            plan = plan_revisits(mu, law)
            dt = time.perf_counter() - t0
            assert plan.template_cost is not None and plan.lower_bound is not None and plan.template is not None
            limit = golden_limit_cost(plan.frequencies, plan.h, 1.0, 1.0, q) / plan.lower_bound
            eq = np.full(N, q / N)
            eq_plan = plan_revisits(eq, law)
            assert eq_plan.template_cost is not None and eq_plan.lower_bound is not None
            opt = optimal_frequencies(eq, law)
            eq_limit = golden_limit_cost(opt.frequencies, opt.h, 1.0, 1.0, q) / opt.cost
            flag = lambda r: "*" if r > GOLDEN_RATIO_BOUND else " "  # noqa: E731
            r1 = plan.template_cost.cost / plan.lower_bound
            r2 = eq_plan.template_cost.cost / eq_plan.lower_bound
            print(f"  {N:>6}  {r1:>13.4f}{flag(r1)}  {limit:>11.4f}{flag(limit)}  {r2:>11.4f}{flag(r2)}  "
                  f"{eq_limit:>6.4f}{flag(eq_limit)}  {plan.template.size:>9}  {dt:>6.3f}s")
    print("  * above 2 phi^2/5: Corollary 5.1 holds for frequencies that are powers of 1/phi, not in general")
    print()


def timing(sizes: list[int]) -> None:
    law = FetchLaw.from_ph(PH.hyperexponential([0.3, 0.7], [0.5, 4.0]))
    print("planning time (H2 fetch law, log-normal change rates spread over two decades, q = mu E[X] = 1), the")
    print("golden cycle against the randomised policy computed in the same call")
    rng = np.random.default_rng(3)
    for N in sizes:
        mu = rng.lognormal(0.0, 1.0, N)
        mu *= 1.0 / (mu.sum() * law.mean)
        t0 = time.perf_counter()
        plan = plan_revisits(mu, law, max_length=2_000_000)
        dt = time.perf_counter() - t0
        assert plan.template is not None and plan.lower_bound is not None
        print(f"  N = {N:>6}: {dt:7.3f} s, cycle of {plan.template.size} fetches ({plan.status.name}), cost / C* = "
              f"{plan.cost / plan.lower_bound:.4f}, randomised / C* = {plan.randomised.cost / plan.lower_bound:.4f}")
    print()


def routing(quick: bool) -> None:
    print("open-loop routing: the searches against each other (time, best cost, sequence)")
    poisson = BMAP.poisson(1.0)
    bursty = mmpp([[-0.2, 0.2], [0.5, -0.5]], [3.0, 0.3])
    cases = [("Poisson, 2 servers 1,5", poisson, [1.0, 5.0], ("local", "enumerate", "mdp"), 12),
             ("MMPP, 2 servers 1,3", bursty, [1.0, 3.0], ("local", "enumerate", "mdp"), 14 if not quick else 12),
             ("Poisson, 3 servers 1,2,4", poisson, [1.0, 2.0, 4.0], ("enumerate", "mdp"), 10 if not quick else 8),
             ("MMPP, 4 servers 1,1.5,2,6", bursty, [1.0, 1.5, 2.0, 6.0], ("mdp",), 20 if not quick else 14)]
    for name, arrivals, rates, methods, P in cases:
        base = None
        for m in methods:
            t0 = time.perf_counter()
            res = route(arrivals, rates, max_period=P, method=m)
            dt = time.perf_counter() - t0
            base = base if base is not None else dt
            seq = " ".join(str(s + 1) for s in res.sequence)
            print(f"  {name:<28} {m:<9} P = {P:>2}: {dt:8.3f} s ({dt / base:6.2f}x)  g = {res.cost:.6f}  "
                  f"[{seq}]  {res.status.name.lower()}"
                  + (f", B* = {res.certified_bound}" if res.certified_bound is not None else ""))
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    sweep([8, 32, 128, 512] if args.quick else [8, 32, 128, 512, 2048])
    timing([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    routing(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
