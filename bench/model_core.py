"""Benchmark of the model core, measured side by side in one run.

1. Optimising the paper example (Table 1 of paper 000) over every subset of modes: time, and the
   error of the optimum against the paper's printed 63.54.
2. One exact solve against the independent brute-force route for K = 5..k_max with the paper example's
   two-phase obsolescence (levels grow like 2^K): time of each and the ratio brute / block, and the
   largest relative difference between their measures.
3. K = 20..200 with exponential obsolescence: time of one exact solve (QBD or block) and the brute
   force where it is still affordable.

Usage: python bench/model_core.py [--k-max 11] [--brute-k-max 11]
(K = 12 with two-phase obsolescence takes minutes for the block solver and far longer for the brute
force: pass --k-max 12 --brute-k-max 12 to measure it.)
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from robotctl.agent import load_model_file
from robotctl.model import PH, Measures, QueueModel, ThresholdPolicy, solve, solve_bruteforce
from robotctl.policies import optimise

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
          "mean_response_served")


def max_rel_diff(a: Measures, b: Measures) -> float:
    return max(abs(getattr(a, f) - getattr(b, f)) / max(abs(getattr(b, f)), 1e-300) for f in FIELDS)


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k-max", type=int, default=11, help="largest K with two-phase obsolescence")
    parser.add_argument("--brute-k-max", type=int, default=10, help="largest K for the brute force there")
    args = parser.parse_args()
    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))

    print("== 1. Table 1 of paper 000: optimum over all subsets of modes (target < 0.5 s)")
    runs = [timed(optimise, model, costs)[1] for _ in range(3)]
    search = optimise(model, costs)
    print(f"   {search.policies_solved} distinct policies solved; best of 3 runs {min(runs):.3f} s "
          f"(target 0.5 s: {'met' if min(runs) < 0.5 else 'NOT met'}); optimum {search.best.policy} "
          f"J = {search.best.cost.total:.4f} (paper 63.54, error {abs(search.best.cost.total - 63.54):.4f})")

    print("\n== 2. one solve, two-phase obsolescence (paper example), policy 3 robots up to 2 pages, then 1")
    print(f"   {'K':>3} {'states':>7} {'method':>7} {'exact s':>9} {'brute s':>9} {'brute/exact':>11} "
          f"{'max rel diff':>12}")
    for K in range(5, args.k_max + 1):
        m = dataclasses.replace(model, capacity=K)
        policy = ThresholdPolicy.from_thresholds((3, 1), (2,), K)
        exact, t_exact = timed(solve, m, policy, method="block")
        if args.brute_k_max >= K:
            brute, t_brute = timed(solve_bruteforce, m, policy)
            ratio = f"{t_brute / t_exact:11.1f}"
            diff = f"{max_rel_diff(exact.measures, brute.measures):12.1e}"
            tb = f"{t_brute:9.3f}"
        else:
            ratio, diff, tb = f"{'-':>11}", f"{'-':>12}", f"{'skipped':>9}"
        print(f"   {K:>3} {exact.n_states:>7} {exact.method:>7} {t_exact:9.3f} {tb} {ratio} {diff}", flush=True)

    print("\n== 3. exponential obsolescence (mean 5 s), single arrivals and batches")
    print(f"   {'K':>4} {'batches':>7} {'states':>7} {'method':>7} {'exact s':>9} {'brute s':>9} {'brute/exact':>11} "
          f"{'max rel diff':>12}")
    exp_model = dataclasses.replace(model, obsolescence=PH.exponential(0.2))
    for K in (20, 50, 100, 200):
        m: QueueModel = dataclasses.replace(exp_model, capacity=K)
        policy = ThresholdPolicy.from_thresholds((3, 1), (K // 3,), K)
        exact, t_exact = timed(solve, m, policy)
        if K <= 50:
            brute, t_brute = timed(solve_bruteforce, m, policy)
            extra = f"{t_brute:9.3f} {t_brute / t_exact:11.1f} {max_rel_diff(exact.measures, brute.measures):12.1e}"
        else:
            extra = f"{'skipped':>9} {'-':>11} {'-':>12}"
        print(f"   {K:>4} {'1-4':>7} {exact.n_states:>7} {exact.method:>7} {t_exact:9.3f} {extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
