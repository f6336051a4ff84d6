"""Scale of the model core (issue 13): every target next to its measured figure, in one run.

Each case runs in a fresh process (so that its peak memory is its own) and prints one JSON line; this
script collects them and prints the table. Figures depend on the machine and on what else runs on it:
the load average at the start and the end of the run is printed with the table, and the big cases show
their CPU time (own and workers') next to the wall time, which a loaded machine inflates.

1. Paper example (K = 5, 4 robots): the optimum over every subset of modes (Table 1), exactly; against
   the route of the previous model core (one block solve per policy), timed the same way.
2. One evaluation at K = 50 (two-phase arrivals and service, exponential obsolescence, batches of 1-4),
   and a one-level re-evaluation (every mode at one level, divided by the number of modes); against one
   block solve; and the largest difference between the two routes' costs.
3. 16 robots, K = 50: a locally optimal policy with its error bar, for the paper's two-phase law (which
   lumps exactly to one phase) and for a two-phase law that does not lump; time and peak memory; and
   issue 26's 32 robots at K = 100 with the law that does not lump (targets 1 s and 5 s of CPU); with
   --workers 1 these two also repeat the optimisation --refits times in the same process, on a model built
   anew each time (a sidecar's refit: warm code and allocator), CPU min, median and max. Each of these two
   runs in --repeat fresh processes (min, median and max printed; the verdict on the min, the run least
   disturbed, as timeit reports, and on the median), and each process first times a fixed reference work
   of numpy calls and LAPACK (no robotctl code), printed next to its optimisation's CPU: this machine's
   speed varies by up to 1.8x from minute to minute, and the reference shows when a run was slow because
   the machine was.
4. 64 robots, K = 200, exponential obsolescence.
4b. Issue 26: the Erlang-3 K = 8 solve that crashed; 16 robots with Erlang-3, H3 and a 10 s deadline at
   K = 12 and K = 50 (each given up after --case-timeout; at K = 50 the 10 s target is the optimisation's
   time budget, or --ladder-seconds if smaller); 128 robots, K = 500, exponential (memory).
5. Exact references: the matrix-free iterative solver at K = 12, 14, 16 with two-phase obsolescence (its
   residual, and its difference from the dense block solver at K = 10); the product form (Poisson modes,
   exponential service) at K = 200.
6. Accuracy: random models with N up to 16 and K up to 50, each optimised, the reported cost against a
   long simulation of the same model and policy (99% interval widened by the error bar).

Usage: python bench/scale.py [--workers 2] [--skip-accuracy] [--events 1000000] [--repeat 3] [--refits 4]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from robotctl.agent import load_model_file
from robotctl.model import (
    BMAP,
    PH,
    Costs,
    LevelChain,
    ModeArrivals,
    PolicyEvaluator,
    QueueLengthPolicy,
    QueueModel,
    ThresholdPolicy,
    cost_of,
    fleet_model,
    random_model,
    simulate_events,
    solve,
    solve_product_form,
)
from robotctl.model._random import TWO_PHASE_LIFE
from robotctl.policies import optimise, threshold_vectors

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config" / "paper-example.yaml"
TWO_PHASE = PH(np.array(TWO_PHASE_LIFE[0]), np.array(TWO_PHASE_LIFE[1]))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def best_of(n: int, fn: Any) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def pool_map(workers: int) -> tuple[Any, Any]:
    if workers <= 1:
        return None, None
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers)
    pool.submit(int, 0).result()  # processes started before the clock runs
    return pool, pool.map


# -- cases (each runs in its own process) --------------------------------------------------------
def case_paper(_: argparse.Namespace) -> dict[str, Any]:
    model, costs = load_model_file(str(EXAMPLE))
    new_s, search = best_of(3, lambda: optimise(model, costs))

    def old_route() -> float:
        best = math.inf
        for size in range(1, 5):
            for subset in __import__("itertools").combinations((4, 3, 2, 1), size):
                for js in threshold_vectors(len(subset), model.capacity):
                    p = ThresholdPolicy.from_thresholds(subset, js, model.capacity)
                    best = min(best, cost_of(solve(model, p, method="block", reduce=False).measures, costs).total)
        return best

    old_s, old_best = best_of(1, old_route)
    return {"seconds": new_s, "old_seconds": old_s, "cost": search.best.cost.total, "old_cost": old_best,
            "policy": str(search.best.policy), "method": search.method}


def case_eval50(_: argparse.Namespace) -> dict[str, Any]:
    model, costs = fleet_model(4, 50, obsolescence="exponential")
    policy = ThresholdPolicy.from_thresholds((4, 1), (15,), 50)
    t = time.perf_counter()
    chain = LevelChain(model)
    cold_cost = PolicyEvaluator(chain, policy.robots_at_level).rates().cost(costs)
    cold = time.perf_counter() - t
    warm, rates = best_of(5, lambda: PolicyEvaluator(chain, policy.robots_at_level).rates())
    ev = PolicyEvaluator(chain, policy.robots_at_level)
    ev.rates()
    n = 0
    t = time.perf_counter()
    for i in range(51):
        n += len(ev.costs_at(i, model.modes, costs))
    one_level = (time.perf_counter() - t) / n
    block_s, sol = best_of(3, lambda: solve(model, policy, method="block"))
    block_cost = cost_of(sol.measures, costs).total
    # worst difference over one-level changes, each against a full block solve
    worst = abs(rates.cost(costs) - block_cost) / block_cost
    for i in (0, 10, 30, 50):
        for mode, c in zip(model.modes, ev.costs_at(i, model.modes, costs)):
            r = list(policy.robots_at_level)
            r[i] = mode
            ref = cost_of(solve(model, QueueLengthPolicy(tuple(r)), method="block").measures, costs).total
            worst = max(worst, abs(c - ref) / ref)
    return {"cold": cold, "warm": warm, "one_level": one_level, "block": block_s, "worst_rel_diff": worst,
            "cost": cold_cost, "states": chain.n_states}


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def reference_cpu() -> float:
    """CPU seconds of a fixed piece of work shaped like an optimisation's (thousands of numpy calls on small
    arrays, a few LAPACK inverses and products of 200 states), so that a slow run can be told apart from a
    slow machine: this machine's speed varies by up to 1.8x from minute to minute, and the same code with it.
    Nothing of robotctl runs in it, so a change of the code does not change it."""
    rng = np.random.default_rng(0)
    small = [rng.random((4, 4)) + 4.0 * np.eye(4) for _ in range(8)]
    big = rng.random((200, 200)) + 200.0 * np.eye(200)
    c = cpu_seconds()
    acc = np.zeros((4, 4))
    for k in range(6000):
        a = small[k % 8]
        acc += np.linalg.solve(a, a @ a.T).reshape(4, 4)[::-1]
    for _ in range(12):
        big = np.linalg.inv(big) @ big + 200.0 * np.eye(200)
    return cpu_seconds() - c


def _fleet(args: argparse.Namespace, robots: int, capacity: int, law: str, refits: int = 0) -> dict[str, Any]:
    model, costs = fleet_model(robots, capacity, obsolescence=law)
    reference = reference_cpu()
    pool, workers = pool_map(args.workers)
    t, c = time.perf_counter(), cpu_seconds()
    try:
        search = optimise(model, costs, method="local", workers=workers, max_seconds=args.ladder_seconds)
    finally:
        if pool is not None:
            pool.shutdown()
    seconds = time.perf_counter() - t
    cpu = cpu_seconds() - c
    refit_cpu = []  # the sidecar's case: the same optimisation again in this process, on a model built anew
    for _ in range(refits if args.workers <= 1 else 0):
        again, _ = fleet_model(robots, capacity, obsolescence=law)
        c = cpu_seconds()
        optimise(again, costs, method="local", max_seconds=args.ladder_seconds)
        refit_cpu.append(cpu_seconds() - c)
    return {"seconds": seconds, "cpu": cpu, "refits_cpu": refit_cpu, "reference_cpu": reference, "rss_mb": rss_mb(),
            "cost": search.best.cost.total,
            "error_bound": search.error_bound,
            "method": search.method, "search_chain": search.search_chain, "profit": search.relative_profit,
            "policy": str(search.best.policy), "policies": search.policies_solved, "reduction": search.reduction,
            "lower_bound": search.lower_bound, "budget": args.ladder_seconds,
            "budget_exhausted": search.budget_exhausted}


def case_fleet16_paper(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 16, 50, "paper")


def case_fleet16_two(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 16, 50, "two-phase", args.refits)


def case_fleet32_two(args: argparse.Namespace) -> dict[str, Any]:
    """Issue 26: 32 robots, K = 100, the two-phase law that does not lump (target 5 s)."""
    return _fleet(args, 32, 100, "two-phase", args.refits)


def case_fleet16_e3(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 16, args.K or 50, "erlang3")


def case_fleet16_h3(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 16, args.K or 50, "h3")


def case_fleet16_deadline(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 16, args.K or 50, "deadline")


def case_solve_e3_k8(_: argparse.Namespace) -> dict[str, Any]:
    """Issue 26's crash: `robotctl solve` (method auto) on 16 robots, K = 8, Erlang-3 obsolescence."""
    model, costs = fleet_model(16, 8, obsolescence="erlang3")
    policy = QueueLengthPolicy(tuple(max(1, 16 - 2 * i) for i in range(9)))
    t = time.perf_counter()
    sol = solve(model, policy)
    return {"seconds": time.perf_counter() - t, "rss_mb": rss_mb(), "method": sol.method, "message": sol.message,
            "residual": sol.residual, "cost": cost_of(sol.measures, costs).total, "states": sol.n_states}


def case_fleet128(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 128, 500, "exponential")


def case_fleet64(args: argparse.Namespace) -> dict[str, Any]:
    return _fleet(args, 64, 200, "exponential")


def _paper_two_phase(K: int) -> tuple[QueueModel, Costs, ThresholdPolicy]:
    model, costs = load_model_file(str(EXAMPLE))
    return dataclasses.replace(model, capacity=K, obsolescence=TWO_PHASE), costs, \
        ThresholdPolicy.from_thresholds((3, 1), (2,), K)


def case_exact(args: argparse.Namespace) -> dict[str, Any]:
    model, costs, policy = _paper_two_phase(args.K)
    t, c = time.perf_counter(), cpu_seconds()
    sol = solve(model, policy, method="iterative")
    seconds = time.perf_counter() - t
    out = {"K": args.K, "seconds": seconds, "cpu": cpu_seconds() - c, "rss_mb": rss_mb(), "states": sol.n_states,
           "residual": sol.residual,
           "cost": cost_of(sol.measures, costs).total, "message": sol.message}
    if args.K <= 10:
        t = time.perf_counter()
        block = solve(model, policy, method="block")
        out["block_seconds"] = time.perf_counter() - t
        out["rel_diff"] = max(abs(getattr(sol.measures, f) / getattr(block.measures, f) - 1.0)
                              for f in ("p_loss", "p_obsolete", "p_starvation", "mean_response_served"))
    return out


def case_product(_: argparse.Namespace) -> dict[str, Any]:
    arrivals = ModeArrivals.per_mode({m: BMAP.poisson(0.2 * m) for m in range(1, 65)})
    model = QueueModel(200, arrivals, PH.exponential(6.0), TWO_PHASE)
    policy = QueueLengthPolicy(tuple(max(1, 64 - i // 3) for i in range(201)))
    seconds, sol = best_of(3, lambda: solve_product_form(model, policy))
    return {"seconds": seconds, "residual": sol.residual}


def _accuracy_case(seed: int, robots: int, K: int, law: str, events: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    order = {"exponential": 1, "two-phase": 2}[law]
    model = random_model(rng, capacity=K, modes=tuple(range(1, robots + 1)), max_batch=3, obsolescence_order=order,
                         load=float(rng.uniform(0.6, 1.4)))
    costs = Costs(loss=float(rng.uniform(1, 5)), obsolescence=float(rng.uniform(1, 5)),
                  response=float(rng.uniform(0.5, 2)), robot=float(rng.uniform(0.5, 3)) * 4 / robots,
                  starvation=float(rng.uniform(10, 50)))
    t = time.perf_counter()
    search = optimise(model, costs, method="local", max_seconds=20.0)
    opt_s = time.perf_counter() - t
    sim = simulate_events(model, search.best.policy, np.random.default_rng(seed + 1), events=events, costs=costs)
    assert sim.cost is not None
    gap = abs(search.best.cost.total - sim.cost.value)
    return {"seed": seed, "N": robots, "K": K, "law": law, "cost": search.best.cost.total, "bar": search.error_bound,
            "method": search.method, "sim": sim.cost.value, "half_width": sim.cost.half_width, "gap": gap,
            "inside": gap <= sim.cost.half_width + search.error_bound, "optimise_s": opt_s}


ACCURACY_CASES = [(1, 4, 10, "two-phase"), (2, 8, 20, "two-phase"), (3, 16, 20, "two-phase"),
                  (4, 16, 50, "exponential"), (5, 8, 50, "exponential"), (6, 16, 30, "two-phase"),
                  (7, 4, 50, "two-phase"), (8, 16, 50, "two-phase")]


def case_accuracy(args: argparse.Namespace) -> dict[str, Any]:
    seed, robots, K, law = ACCURACY_CASES[args.K]
    return _accuracy_case(seed, robots, K, law, args.events)


CASES = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("case_")}


def run_case(name: str, args: argparse.Namespace, K: int = 0, timeout: float | None = None,
             budget: float | None = None) -> dict[str, Any]:
    """One case in a fresh process; ``budget``: its optimisation's time budget instead of --ladder-seconds."""
    seconds = args.ladder_seconds if budget is None else budget
    cmd = [sys.executable, __file__, "--case", name, "--K", str(K), "--workers", str(args.workers),
           "--events", str(args.events), "--ladder-seconds", str(seconds), "--refits", str(args.refits)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout:g} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for parallel restarts")
    parser.add_argument("--skip-accuracy", action="store_true", help="skip the simulation table (minutes)")
    parser.add_argument("--events", type=int, default=1_000_000, help="simulated events per accuracy case")
    parser.add_argument("--ladder-seconds", type=float, default=20.0,
                        help="time budget of each optimisation (its search, then its error bar's ladder)")
    parser.add_argument("--refits", type=int, default=4,
                        help="with --workers 1: the H2 fleets' optimisation repeated this many times in the same "
                             "process after the first, as a sidecar refits (CPU min, median, max)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes for each of the H2 fleets' CPU targets (min, median and max printed)")
    parser.add_argument("--case-timeout", type=float, default=300.0, help="seconds before a case of 4b is given up")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--K", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("repeat", "refits", "workers"):
        if getattr(args, name) < (1 if name != "refits" else 0):
            parser.error(f"--{name} must be at least {1 if name != 'refits' else 0}, got {getattr(args, name)}")
    if args.case:
        print(json.dumps(CASES[args.case](args), default=str))
        return 0
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; workers {args.workers}")

    print("\n== 1. paper example, optimum over all subsets of modes (target: < 0.1 s, exact)")
    r = run_case("paper", args)
    print(f"   {r['seconds']:.3f} s (best of 3) against {r['old_seconds']:.3f} s by one block solve per policy "
          f"({r['old_seconds'] / r['seconds']:.1f}x); J = {r['cost']:.4f} (paper 63.54, block route "
          f"{r['old_cost']:.4f}), {r['method']}: target {verdict(r['seconds'] < 0.1)}")

    print("\n== 2. one evaluation at K = 50, 4 modes (targets: <= 25 ms; one-level re-evaluation <= 1 ms)")
    r = run_case("eval50", args)
    print(f"   {r['states']} states: cold {1000 * r['cold']:.1f} ms (chain built), warm {1000 * r['warm']:.1f} ms, "
          f"one-level {1000 * r['one_level']:.3f} ms per policy; one block solve {1000 * r['block']:.1f} ms; "
          f"largest relative difference from block solves {r['worst_rel_diff']:.1e}")
    print(f"   evaluation target {verdict(r['warm'] <= 0.025)} (cold {verdict(r['cold'] <= 0.025)}), "
          f"re-evaluation target {verdict(r['one_level'] <= 0.001)}")

    print("\n== 3-4. fleets (targets: 16 robots K = 50 <= 10 s (stretch 3 s) and < 2 GB; 64 robots K = 200 < 30 s)")
    print(f"   {'case':<34}{'seconds':>9}{'cpu s':>7}{'MB':>7}{'J':>11}{'+-':>9}  {'method':<20}{'R %':>6}  policies")
    for name, label, limit in (("fleet16_paper", "16 robots, K=50, paper's 2-phase", 10.0),
                               ("fleet16_two", "16 robots, K=50, 2-phase (no lump)", 10.0),
                               ("fleet32_two", "32 robots, K=100, 2-phase (no lump)", 30.0),
                               ("fleet64", "64 robots, K=200, exponential", 30.0)):
        h2_target = {"fleet16_two": 1.0, "fleet32_two": 5.0}.get(name)
        runs = [run_case(name, args) for _ in range(args.repeat if h2_target is not None else 1)]
        r = runs[0]
        if "error" in r:
            print(f"   {label:<34} failed: {r['error']}")
            continue
        print(f"   {label:<34}{r['seconds']:>9.2f}{r['cpu']:>7.1f}{r['rss_mb']:>7.0f}{r['cost']:>11.4f}"
              f"{r['error_bound']:>9.2g}  "
              f"{r['method']:<20}{r['profit']:>6.1f}  {r['policies']}  target {verdict(r['seconds'] <= limit)}"
              f"{'' if limit > 10 else ', stretch ' + verdict(r['seconds'] <= 3.0)}; MDP gap: bound not computed")
        print(f"   {'':<34}search on {r['search_chain']}; {'; '.join(r['reduction']) or 'no reduction'}")
        if h2_target is not None:  # issue 26, judged on CPU time (wall time depends on the machine's load)
            done = [x for x in runs if "error" not in x]
            fresh = sorted(x["cpu"] for x in done)
            print(f"   {'':<34}issue 26: <= {h2_target:g} s of CPU, {len(fresh)} fresh processes: min {fresh[0]:.2f}, "
                  f"median {fresh[len(fresh) // 2]:.2f}, max {fresh[-1]:.2f} s: {verdict(fresh[0] <= h2_target)} "
                  f"(min, as timeit reports: the run least disturbed), {verdict(fresh[len(fresh) // 2] <= h2_target)} "
                  "(median)")
            print(f"   {'':<34}each run's CPU / its process's reference work (the machine's speed then): "
                  + ", ".join(f"{x['cpu']:.2f}/{x['reference_cpu']:.3f}" for x in done)
                  + (f"; cost {'the same' if len({x['cost'] for x in done}) == 1 else 'DIFFERS'} in every run"))
            warm = sorted(w for x in done for w in x["refits_cpu"])
            if warm:
                print(f"   {'':<34}the same optimisation again in those processes (a sidecar's refit), {len(warm)} "
                      "times: "
                      f"CPU min {warm[0]:.2f}, median {warm[len(warm) // 2]:.2f}, max {warm[-1]:.2f} s: "
                      f"{verdict(warm[len(warm) // 2] <= h2_target)} (median)")

    print("\n== 4b. issue 26 (targets: Erlang-3, H3, 10 s deadline at 16 robots K = 50 each <= 10 s and 2 GB; "
          "128 robots K = 500 exponential <= 300 MB; the K = 8 Erlang-3 solve answers)")
    r = run_case("solve_e3_k8", args, timeout=args.case_timeout)
    print("   solve, 16 robots, K = 8, Erlang-3: " + (r["error"] if "error" in r else
          f"{r['seconds']:.1f} s, {r['rss_mb']:.0f} MB, method {r['method']} ({r['message']}), {r['states']} states, "
          f"J = {r['cost']:.4f}"))
    for name, K in (("fleet16_e3", 12), ("fleet16_h3", 12), ("fleet16_deadline", 12), ("fleet16_e3", 50),
                    ("fleet16_h3", 50), ("fleet16_deadline", 50), ("fleet128", 500)):
        # "optimised within 10 s": the K = 50 three-phase fleets are given the target as their budget (the search
        # runs to its end; the ladder starts no depth projected to end after the budget, and says when it stopped)
        budget = min(args.ladder_seconds, 10.0) if K == 50 else None
        r = run_case(name, args, K if name != "fleet128" else 0, timeout=args.case_timeout, budget=budget)
        label = f"{name} K={K}"
        if "error" in r:
            print(f"   {label:<24} failed: {r['error']}  target NOT met")
            continue
        limit_s, limit_mb = (1e9, 300.0) if name == "fleet128" else ((10.0, 2048.0) if K == 50 else (1e9, 1e9))
        ok = r["seconds"] <= limit_s and r["rss_mb"] <= limit_mb
        print(f"   {label:<24}{r['seconds']:>9.2f} s ({r['cpu']:.1f} s cpu) {r['rss_mb']:>7.0f} MB  "
              f"J = {r['cost']:.4f} +- "
              f"{r['error_bound']:.3g} ({r['method']}, search on {r['search_chain']}; budget {r['budget']:g} s"
              f"{', the bar cut short by it' if r['budget_exhausted'] else ''})"
              + ("" if limit_s > 1e8 and limit_mb > 1e8 else f"  target {verdict(ok)}"))

    print("\n== 5. exact references (targets: K = 12 two-phase <= 5 s, K = 16 <= 60 s)")
    for K in (10, 12, 14, 16):
        r = run_case("exact", args, K)
        extra = ""
        if "block_seconds" in r:
            extra = f"; dense block solver {r['block_seconds']:.2f} s, largest relative difference {r['rel_diff']:.1e}"
        target = {12: 5.0, 16: 60.0}.get(K)
        verdict_text = "" if target is None else "  target " + verdict(r["seconds"] <= target)
        print(f"   K = {K:>2}: {r['states']:>7} states {r['seconds']:7.2f} s ({r['cpu']:.1f} s cpu) "
              f"{r['rss_mb']:6.0f} MB residual {r['residual']:.1e}{extra}{verdict_text}")
    r = run_case("product", args)
    print(f"   product form, 64 Poisson modes, K = 200: {1000 * r['seconds']:.0f} ms, "
          f"quadrature check {r['residual']:.1e}")

    if not args.skip_accuracy:
        print(f"\n== 6. accuracy: optimised cost against {args.events:,} simulated events "
              "(99% interval widened by the error bar)")
        print(f"   {'N':>3}{'K':>4}  {'obsolescence':<13}{'method':<20}{'J':>11}{'+-':>9}{'simulated':>11}{'99% hw':>8}"
              f"{'gap':>8}  inside")
        inside = 0
        for k in range(len(ACCURACY_CASES)):
            r = run_case("accuracy", args, k)
            if "error" in r:
                print(f"   case {k} failed: {r['error']}")
                continue
            inside += r["inside"]
            print(f"   {r['N']:>3}{r['K']:>4}  {r['law']:<13}{r['method']:<20}{r['cost']:>11.4f}{r['bar']:>9.2g}"
                  f"{r['sim']:>11.4f}{r['half_width']:>8.3f}{r['gap']:>8.3f}  {'yes' if r['inside'] else 'NO'}")
        print(f"   {inside} of {len(ACCURACY_CASES)} inside")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
