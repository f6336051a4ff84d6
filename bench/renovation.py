"""Benchmark of the buffer-rule core (renovation, RED, timers), measured side by side in one run.

1. Timers only, paper example with K = 5..k_max: the buffer core (``solve_buffer``) against paper 000's
   block solver on the same model: time of each, their ratio, and the largest difference of the cost.
2. Renovation without timers (stale marks, rho = R + 1 phases per waiting page), K = 5..k_max: states,
   time to prepare, time per renovation law with the prepared blocks, and the tagged chain solved
   position by position against one sparse LU of the whole tagged generator (same answer, ratio).
3. The brute-force route against the core for small K: time ratio and largest difference of a measure.
4. The comparison (``compare_buffers``) on the paper example and on the fitted demo crawl: wall time and
   exact solves.

Usage: python bench/renovation.py [--k-max 8] [--renovation-k-max 6]
(Renovation without timers on the paper example has 3 phases per waiting page: K = 7 is 4374 states,
past the dense LU's range; it takes tens of seconds per renovation law. Pass --renovation-k-max 7.)
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from robotctl.agent import load_model_file
from robotctl.model import (
    BufferPolicy,
    Conflict,
    PreparedBuffer,
    Renovation,
    ThresholdPolicy,
    buffer_cost,
    cost_of,
    solve,
    solve_buffer,
    solve_buffer_bruteforce,
)
from robotctl.policies import compare_buffers, optimise

ROOT = Path(__file__).resolve().parents[1]
Q = Renovation((0.5, 0.2, 0.2, 0.1), Conflict.KEEP_ONE)


class Counter:
    """Counts the exact solves reported by a search's progress callback."""

    def __init__(self) -> None:
        self.total = 0

    def __call__(self, n: int) -> None:
        self.total += n


def policy_for(K: int) -> ThresholdPolicy:
    return ThresholdPolicy.from_thresholds((3, 1), (2,), K)


def best_of(n: int, fn, *args, **kwargs) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k-max", type=int, default=8, help="largest K with timers")
    parser.add_argument("--renovation-k-max", type=int, default=6, help="largest K for renovation without timers")
    args = parser.parse_args()
    example, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))

    print("== 1. timers only: buffer core against paper 000's block solver (same model, same measures)")
    print(f"   {'K':>3} {'states':>7} {'block s':>9} {'buffer s':>9} {'ratio':>7} {'|dJ|':>9}")
    for K in range(5, args.k_max + 1):
        model = dataclasses.replace(example, capacity=K)
        pol = policy_for(K)
        t_block = best_of(3, solve, model, pol)
        t_buf = best_of(3, solve_buffer, model, pol, BufferPolicy())
        diff = abs(cost_of(solve(model, pol).measures, costs).total
                   - buffer_cost(solve_buffer(model, pol, BufferPolicy()).measures, costs).total)
        print(f"   {K:>3} {solve(model, pol).n_states:>7} {t_block:>9.4f} {t_buf:>9.4f} {t_buf / t_block:>7.1f} "
              f"{diff:>9.2g}")

    print("== 2. renovation without timers: per law with prepared blocks; tagged chain by positions vs whole LU")
    print(f"   {'K':>3} {'states':>7} {'tagged':>7} {'prepare s':>10} {'per law s':>10} {'sweep s':>9} "
          f"{'whole LU s':>11} {'ratio':>7} {'|dh|':>9}")
    for K in range(5, args.renovation_k_max + 1):
        model = dataclasses.replace(example, capacity=K)
        pol = policy_for(K)
        start = time.perf_counter()
        prep = PreparedBuffer(model, pol, BufferPolicy(False))
        prep.solve(Q)
        t_prep = time.perf_counter() - start
        t_law = best_of(3, prep.solve, Q)
        t_sweep = best_of(3, prep._fates, Q)
        T = prep.tagged(Q)
        served = prep.tagged_exits(Q)["served"]
        start = time.perf_counter()
        whole = spla.splu(sp.csc_matrix(-T)).solve(served)
        t_whole = time.perf_counter() - start
        h, _ = prep._fates(Q)
        sweep = np.concatenate([h[key] for key in prep._tagged_index()])
        print(f"   {K:>3} {prep.n_states:>7} {T.shape[0]:>7} {t_prep:>10.3f} {t_law:>10.4f} {t_sweep:>9.4f} "
              f"{t_whole:>11.4f} {t_whole / t_sweep:>7.1f} {np.abs(whole - sweep).max():>9.2g}")

    print("== 3. brute force (explicit states and transitions) against the core")
    for K in (3, 4, 5):
        model = dataclasses.replace(example, capacity=K)
        pol = policy_for(K)
        buffer = BufferPolicy(False, Renovation((0.5, 0.3, 0.2)[:K], Conflict.SKIP))
        t_core = best_of(1, solve_buffer, model, pol, buffer)
        t_brute = best_of(1, solve_buffer_bruteforce, model, pol, buffer)
        a, b = solve_buffer(model, pol, buffer).measures, solve_buffer_bruteforce(model, pol, buffer).measures
        worst = max(abs(getattr(a, f.name) - getattr(b, f.name)) for f in dataclasses.fields(a)
                    if isinstance(getattr(a, f.name), float))
        print(f"   K = {K}: core {t_core:.4f} s, brute {t_brute:.4f} s (ratio {t_brute / t_core:.1f}), "
              f"largest difference {worst:.2g}")

    print("== 4. compare_buffers (timers, best renovation, best RED, none)")
    fitted, fitted_costs = load_model_file(str(ROOT / "config" / "demo-fitted.yaml"))
    for name, model, c in (("paper example", example, costs), ("fitted demo crawl", fitted, fitted_costs)):
        pol = optimise(model, c).best.policy
        counter = Counter()
        start = time.perf_counter()
        out = compare_buffers(model, c, pol, progress=counter)
        print(f"   {name} (K = {model.capacity}, policy {pol}): {time.perf_counter() - start:.1f} s, "
              f"{counter.total} exact solves; cheapest {out.best.name} J = {out.best.cost.total:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
