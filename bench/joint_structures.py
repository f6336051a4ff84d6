"""The joint fit's structures on paper 000's own example traffic (config/paper-example.yaml: a MAP per mode
on two common phases whose batches move the phase): for each seed, a window is simulated by the model's
event simulator, fitted with ``fit_model`` under ``arrivals: per_mode``, ``joint`` (``joint_structure:
auto``, shared or linear by BIC) and ``joint_structure: all`` (general too), the optimal threshold policy of
each fitted model is found (``policies.optimise``), and its cost is priced under the TRUE model against the
true optimum (regret). Two windows: ``probe`` (each mode alone for 1500 s, modes 4, 3, 2, 1: the agent's
first window, 3 mode changes) and ``threshold`` (6000 s under the threshold policy 4,4,3,2,1,1: modes that
switch with the queue). Fit times are wall seconds on whatever load the machine has.

Run: .venv/bin/python bench/joint_structures.py [seeds ...]   (default 1 2 3)
"""

from __future__ import annotations

import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # noqa: E402

from robotctl.agent import load_model_file  # noqa: E402
from robotctl.fitting import ModeTrajectory, fit_model  # noqa: E402
from robotctl.fitting._modelcheck import _exact_costs  # noqa: E402
from robotctl.model import Simulation, ThresholdPolicy, TraceKind  # noqa: E402
from robotctl.policies import optimise  # noqa: E402

PROBE_S = 1500.0
VARIANTS = {"per_mode": {"arrivals": "per_mode"}, "joint auto": {"arrivals": "joint"},
            "joint all": {"arrivals": "joint", "joint_structure": "all"}}


def window(model, kind: str, seed: int):  # type: ignore[no-untyped-def]
    if kind == "probe":
        def controller(n: int, active: int, t: float) -> int:
            return 4 - min(int(t // PROBE_S), 3)
        sim = Simulation(model, controller, np.random.default_rng(seed), record=True)
    else:
        sim = Simulation(model, ThresholdPolicy((4, 4, 3, 2, 1, 1)), np.random.default_rng(seed), record=True)
    end = 4 * PROBE_S
    sim.advance(t_end=end)
    rows = sim.take_rows()
    changes = [(0.0, 4)]
    for r in rows:
        if r.kind in (TraceKind.PARK, TraceKind.RESUME) and r.active != changes[-1][1]:
            changes.append((r.t, int(r.active)))
    d = [r for r in rows if r.kind is TraceKind.DELIVERY]
    return (np.array([r.t for r in d]), np.array([r.pages for r in d]), np.array([r.active for r in d]),
            np.array([r.service_s for r in rows if r.kind is TraceKind.COMPLETION]),
            ModeTrajectory(np.array([c[0] for c in changes]), np.array([c[1] for c in changes]), end_s=end))


def main() -> None:
    seeds = [int(s) for s in sys.argv[1:]] or [1, 2, 3]
    truth, costs = load_model_file(os.path.join(os.path.dirname(_HERE), "config", "paper-example.yaml"))
    best = optimise(truth, costs).best.policy
    j_opt = _exact_costs(truth, (best,), costs)[0]
    print(f"true optimum {best.robots_at_level}, J {j_opt:.2f} (loaded machine: fit times are indicative)")
    print(f"{'window':>10s}{'seed':>5s}  " + "".join(f"{v:>34s}" for v in VARIANTS))
    for kind in ("probe", "threshold"):
        for seed in seeds:
            t, pages, modes, service, traj = window(truth, kind, seed)
            cells = []
            for opts in VARIANTS.values():
                t0 = time.perf_counter()
                fit = fit_model(t, pages=pages, modes=modes, mode_changes=traj, all_modes=[1, 2, 3, 4],
                                service_times=service, mean_useful_life_s=float(truth.obsolescence.mean),
                                capacity=truth.capacity, options=opts)
                policy = optimise(fit.model, costs).best.policy
                took = time.perf_counter() - t0
                regret = _exact_costs(truth, (policy,), costs)[0] / j_opt - 1
                how = fit.joint.params.structure if fit.joint is not None else "moments"
                cells.append(f"{how} {''.join(map(str, policy.robots_at_level))} {100 * regret:+.1f}% {took:.1f}s")
            print(f"{kind:>10s}{seed:5d}  " + "".join(f"{c:>34s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
