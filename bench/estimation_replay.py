"""Issue 27's acceptance experiment: replay a few simulated hours of burst/quiet traffic (one hidden phase
shared by 4 modes, the modes set by a threshold policy through the queue) through the agent, once with the
per-mode fit (fit.options.arrivals: per_mode) and once with the joint fit (joint, the default auto's choice), and
price every adopted policy under the TRUE model (model.solve) against the true optimum (policies.optimise
on the truth): the regret of the last policy, the time-weighted regret over the windows after the first,
each window's predicted cost against the truth of its policy, and the replay's wall time.

Run: .venv/bin/python bench/estimation_replay.py [seconds] [seed] [variants, e.g. per_mode,joint,joint_auto]
(ESTIMATION_TRUTH=linear: the linear-rule truth instead, each mode Poisson at r times one robot's rate.)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # noqa: E402

from robotctl.agent.config import AgentConfig  # noqa: E402
from robotctl.agent.replay import ReplayOptions, replay  # noqa: E402
from robotctl.agent.sources import read_events  # noqa: E402
from robotctl.agent.trace import TraceEvent  # noqa: E402
from robotctl.model import (  # noqa: E402
    BMAP,
    PH,
    Costs,
    ModeArrivals,
    QueueModel,
    Simulation,
    ThresholdPolicy,
    TraceKind,
    cost_of,
    solve,
)
from robotctl.policies import optimise  # noqa: E402

_ACTIVE = (TraceKind.DELIVERY, TraceKind.PARK, TraceKind.RESUME)
Q = np.array([[-0.02, 0.02], [0.05, -0.05]])       # quiet (mean 50 s) and burst (mean 20 s)
BASE = np.array([0.15, 1.2])                        # batches/s per robot in each phase
PROBS = (0.7, 0.3)
K = 8
COSTS = {"loss": 5, "obsolescence": 10, "response": 2, "robot": 20, "starvation": 300}
RECORDED = "4,4,3,3,2,2,1,1,1"


#: ``shared`` (the default): the burst/quiet phase shared by all modes; ``linear``: issue 27's linear-rule
#: truth, each mode Poisson with r times one robot's rate (the shared truth's long-run rate), batches alike
TRUTH = os.environ.get("ESTIMATION_TRUTH", "shared")


def truth() -> QueueModel:
    if TRUTH == "linear":
        pi = np.array([Q[1, 0], Q[0, 1]]) / (Q[1, 0] + Q[0, 1])
        lam = float(pi @ BASE)
        bmaps = {r: BMAP.from_matrices([np.array([[-lam * r]])] + [np.array([[lam * r * p]]) for p in PROBS])
                 for r in (1, 2, 3, 4)}
    else:
        bmaps = {r: BMAP.from_matrices([Q - np.diag(BASE * r)] + [np.diag(BASE * r * p) for p in PROBS])
                 for r in (1, 2, 3, 4)}
    return QueueModel(K, ModeArrivals.per_mode(bmaps), PH.exponential(2.5), PH.exponential(0.2))


def write_trace(path: Path, seconds: float, seed: int) -> int:
    sim = Simulation(truth(), ThresholdPolicy.parse(RECORDED), np.random.default_rng(seed), record=True)
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        while True:
            sim.advance(max_events=50_000)
            taken = sim.take_rows()
            rows = [r for r in taken if r.t <= seconds]
            out.write("".join(TraceEvent(r.t, r.kind.value, None if r.robot is None else str(r.robot), r.pages,
                                         None, r.service_s, {"active": r.active} if r.kind in _ACTIVE else {}
                                         ).to_json() + "\n" for r in rows))
            n += sum(1 for r in rows if r.kind is TraceKind.DELIVERY)
            if not taken or taken[-1].t >= seconds:
                return n


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 14_400.0
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    model, costs = truth(), Costs(**COSTS)
    best = optimise(model, costs)
    j_star = float(best.best.cost.total)
    j_rec = float(cost_of(solve(model, ThresholdPolicy.parse(RECORDED)).measures, costs).total)
    print(f"truth ({TRUTH}): optimum {best.best.policy.robots_at_level} J* = {j_star:.3f}; "
          f"recorded {RECORDED} J = {j_rec:.3f}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        n = write_trace(path, seconds, seed)
        print(f"trace: {seconds:.0f} s, {n} deliveries, seed {seed}")
        variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["per_mode", "joint", "joint_auto"]
        for arrivals in variants:
            options = ({"arrivals": "joint", "joint_structure": "auto"} if arrivals == "joint_auto"
                       else {"arrivals": arrivals})
            cfg = AgentConfig.from_dict({
                "queue": {"capacity": K}, "robots": 4, "costs": COSTS,
                "refit": {"interval_s": 1800, "window_s": 3600, "min_interval_s": 60, "min_deliveries": 500},
                "fit": {"mean_useful_life_s": 5.0, "options": options},
                "log": {"dir": str(Path(tmp) / "x")}})
            t0, c0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
            result = replay(read_events([str(path)]), cfg, ReplayOptions(sim_events=100_000))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows = []
            for w in result.windows:
                true_cost = float(cost_of(solve(model, w.policy).measures, costs).total)
                rows.append((w.in_force[1] - w.in_force[0], true_cost, float(w.cost.total), w.policy,
                             (w.fit.get("predicted") or {}).get("cost_interval"), w.fit.get("structure")))
            if not rows:
                print(f"{arrivals}: no window adopted ({result.message})")
                continue
            later = rows[1:] or rows
            dur = np.array([r[0] for r in later])
            tw = float(np.dot(dur, [r[1] for r in later]) / max(dur.sum(), 1e-12)) / j_star - 1
            last = rows[-1]
            attempts = len(result.attempts)
            print(f"\n{arrivals}: {len(rows)} windows adopted of {attempts} refits, replay {wall:.1f} s wall, "
                  f"{cpu:.1f} s CPU (load average {load0:.1f} -> {os.getloadavg()[0]:.1f})")
            reasons = Counter(a.reason.split()[0] for a in result.attempts)
            print("  refits by reason: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
            print(f"  last policy {last[3].robots_at_level}: true J {last[1]:.3f}, regret {last[1] / j_star - 1:+.1%}; "
                  f"predicted {last[2]:.3f} ({last[2] / last[1] - 1:+.1%} vs its true cost)")
            print(f"  time-weighted regret after the first window {tw:+.1%}")
            covered = [iv[0] <= tc <= iv[1] for _, tc, _, _, iv, _ in rows if iv and None not in iv]
            if covered:
                print(f"  predicted intervals covering the true cost: {sum(covered)} of {len(covered)}")
            for d, tc, pc, pol, iv, _ in rows:
                band = f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv and None not in iv else ""
                print(f"    {d:7.0f} s  {pol.robots_at_level!s:28s} true {tc:8.3f} ({tc / j_star - 1:+6.1%})  "
                      f"predicted {pc:8.3f} ({pc / tc - 1:+6.1%}){band}")
            for row in result.comparison:
                print(f"  {row.name:<12} J = {row.cost:8.3f}  [{row.ci[0]:.3f}, {row.ci[1]:.3f}]  {row.basis}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
