"""Simulator speed and accuracy, measured side by side in one run.

Speed: events per CPU second (process time, so that other load on the machine does not count) of the
engine on the paper example's optimum (the baseline, 10^7 measured events), and of the same model with
the trace recorded, with a callable controller, without obsolescence, with whole-batch rejection, and
of a larger random model (2 * 10^6 events each), each as a ratio to the baseline. Accuracy: for each
run, the largest |exact - simulated| / standard error over the measures and whether every exact value
lies inside the family-wise 99% intervals; and the empirical coverage of the 99% intervals over
independent replications of a small random model (should be close to 0.99).

Usage: python bench/simulator.py [--quick]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robotctl.agent import load_model_file  # noqa: E402
from robotctl.model import (  # noqa: E402
    Admission,
    Controller,
    QueueModel,
    SimulationResult,
    ThresholdPolicy,
    random_model,
    random_policy,
    simulate_events,
    solve,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "paper-example.yaml"


def timed(model: QueueModel, controller: ThresholdPolicy | Controller, events: int, seed: int, *,
          trace: bool = False) -> tuple[SimulationResult, float, float]:
    rows = 0

    def count(chunk: tuple) -> None:
        nonlocal rows
        rows += len(chunk)

    start, cpu = time.perf_counter(), time.process_time()
    result = simulate_events(model, controller, np.random.default_rng(seed), events=events,
                             on_trace=count if trace else None)
    return result, time.perf_counter() - start, time.process_time() - cpu


def accuracy(result: SimulationResult, model: QueueModel, policy: ThresholdPolicy) -> tuple[float, bool]:
    measures = solve(model, policy).measures
    comparison = result.check(measures, familywise=True)
    z = max(abs(row.z) for row in result.check(measures).rows)
    return z, comparison.all_inside


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10^6 instead of 10^7 baseline events")
    args = parser.parse_args()
    base_events = 1_000_000 if args.quick else 10_000_000
    side_events = base_events // 5

    model, _ = load_model_file(str(EXAMPLE))
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    table = policy.robots_at_level
    big = random_model(np.random.default_rng(4), capacity=8, arrival_order=2, service_order=2,
                       obsolescence_order=2, modes=(1, 2, 3, 4), max_batch=4, load=1.2)
    big_policy = random_policy(np.random.default_rng(5), (1, 2, 3, 4), 8)

    def controller(queue_length: int, active: int, t: float) -> int:
        return table[queue_length]

    runs: list[tuple[str, QueueModel, ThresholdPolicy, ThresholdPolicy | Controller, int, bool]] = [
        ("paper optimum (baseline)", model, policy, policy, base_events, False),
        ("  with trace recorded", model, policy, policy, side_events, True),
        ("  callable controller", model, policy, controller, side_events, False),
        ("  without obsolescence", dataclasses.replace(model, obsolescence=None), policy, policy,
         side_events, False),
        ("  reject whole batches", dataclasses.replace(model, admission=Admission.REJECT_BATCH), policy,
         policy, side_events, False),
        ("random K=8, 4 modes, batches<=4", big, big_policy, big_policy, side_events, False),
    ]
    print(f"{'run':36}{'events':>12}{'wall s':>9}{'cpu s':>8}{'events/cpu s':>14}{'ratio':>8}{'max|z|':>9}"
          "  exact inside 99% (fw)")
    baseline = 0.0
    for name, m, p, ctrl, events, trace in runs:
        result, wall, cpu = timed(m, ctrl, events, seed=1, trace=trace)
        total = result.events + result.warmup_events
        rate = total / cpu
        baseline = baseline or rate
        z, all_inside = accuracy(result, m, p)
        print(f"{name:36}{total:>12,}{wall:>9.2f}{cpu:>8.2f}{rate:>14,.0f}{rate / baseline:>8.2f}{z:>9.2f}"
              f"  {all_inside}")
    print(f"baseline: {base_events:,} measured events (+10% warm-up) in {(base_events * 1.1) / baseline:.1f} "
          "CPU seconds on one core (wall time is longer when other processes share the core)")

    # coverage of the 99% intervals over independent replications of one small model
    reps = 20 if args.quick else 60
    rng = np.random.default_rng(7)
    small = random_model(rng, capacity=3, modes=(1, 2), max_batch=2)
    small_policy = ThresholdPolicy((2, 2, 1, 1))
    exact = solve(small, small_policy).measures
    inside = total_checks = 0  # intervals holding the exact value, intervals checked
    start = time.perf_counter()
    for r in range(reps):
        result = simulate_events(small, small_policy, np.random.default_rng(1000 + r), events=100_000)
        rows = result.check(exact).rows
        inside += sum(row.inside for row in rows)
        total_checks += len(rows)
    print(f"coverage of 99% intervals: {inside}/{total_checks} = {inside / total_checks:.4f} "
          f"({reps} replications x {total_checks // reps} measures, 10^5 events each, "
          f"{time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
