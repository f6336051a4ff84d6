"""Issue 27: do the refit's 95% cost intervals cover the truth? Many independent windows of a known truth,
each fitted by the agent's own refit computation (``agent.compute.compute_refit``, joint fit, structure and
phases by BIC), and the interval it reports (``fit["predicted"]["cost_interval"]``) compared with the EXACT
cost of the policy it chose under the truth (``model.solve`` on the true model). Also the model check's
verdicts on the same windows (the true model is then the fitted family's: a misfit is a false alarm).

Truths (bench/estimation_replay.py's): ``shared``, one burst/quiet phase shared by 4 modes (quiet 0.15 and
burst 1.2 batches/s per robot, 1-2 pages, K = 8, exponential service 2.5 pages/s, useful life 5 s, known);
``poisson``, each mode Poisson at r times one robot's long-run rate (the linear rule). The recorded fleet
4,4,3,3,2,2,1,1,1 sets the modes through the queue; each window starts after a warm-up of 600 s of its own
run (seed), so the windows are independent.

Run: .venv/bin/python bench/coverage.py [windows per case] [cases, e.g. shared:3000,poisson:3000,shared:30000]
(COVERAGE_SEED0: the first seed, 1000 by default.) Prints, per case, the coverage with its exact
(Clopper-Pearson) 95% interval, the windows that said ``uncertain``, the model check's false alarms, the
median relative half-width, the mean relative error of the prediction and the wall time per window.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from robotctl.agent.compute import RefitInput, compute_refit  # noqa: E402
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
    linear_ratio_estimate,
    solve,
)

Q = np.array([[-0.02, 0.02], [0.05, -0.05]])       # quiet (mean 50 s) and burst (mean 20 s)
BASE = np.array([0.15, 1.2])                        # batches/s per robot in each phase
PROBS = (0.7, 0.3)
K = 8
SERVICE_RATE = 2.5
USEFUL_LIFE_S = 5.0
COSTS = Costs(loss=5, obsolescence=10, response=2, robot=20, starvation=300)
RECORDED = ThresholdPolicy.parse("4,4,3,3,2,2,1,1,1")
WARMUP_S = 600.0
BATCHES = 20                                        # snapshots of the totals for the observed cost


def truth(name: str) -> QueueModel:
    """The true model: ``shared`` (one burst/quiet phase) or ``poisson`` (the linear rule)."""
    if name == "poisson":
        pi = np.array([Q[1, 0], Q[0, 1]]) / (Q[1, 0] + Q[0, 1])
        lam = float(pi @ BASE)
        bmaps = {r: BMAP.from_matrices([np.array([[-lam * r]])] + [np.array([[lam * r * p]]) for p in PROBS])
                 for r in (1, 2, 3, 4)}
    elif name == "shared":
        bmaps = {r: BMAP.from_matrices([Q - np.diag(BASE * r)] + [np.diag(BASE * r * p) for p in PROBS])
                 for r in (1, 2, 3, 4)}
    else:
        raise SystemExit(f"unknown truth {name!r}: use shared or poisson")
    return QueueModel(K, ModeArrivals.per_mode(bmaps), PH.exponential(SERVICE_RATE), PH.exponential(1 / USEFUL_LIFE_S))


def observe(model: QueueModel, seconds: float, seed: int) -> tuple[RefitInput, float]:
    """One window of ``seconds`` after the warm-up, simulated under the recorded fleet (model core's
    simulator), as the agent's refit would get it: deliveries with their modes, the mode trajectory, the
    service times of the completions, and the cost observed over the window with its batch-means interval.
    Returns the input and the simulation's wall time."""
    t0 = time.perf_counter()
    sim = Simulation(model, RECORDED, np.random.default_rng(seed), record=True)
    sim.advance(t_end=WARMUP_S)
    sim.take_rows()
    start_mode = int(sim.mode)
    snaps = [sim.totals()]
    for b in range(1, BATCHES + 1):
        sim.advance(t_end=WARMUP_S + seconds * b / BATCHES)
        snaps.append(sim.totals())
    rows = sim.take_rows()
    L = sim.layout
    d = np.diff(np.asarray(snaps), axis=0)
    active = d[:, L.mode_time:] @ np.arange(L.max_mode + 1)
    est = linear_ratio_estimate([
        (COSTS.loss, d[:, L.LOST], d[:, L.TIME]), (COSTS.obsolescence, d[:, L.OBSOLETE], d[:, L.TIME]),
        (COSTS.response, d[:, L.SOJOURN_SERVED], d[:, L.SERVED]), (COSTS.robot, active, d[:, L.TIME]),
        (COSTS.starvation, d[:, L.QUEUE_TIME], d[:, L.TIME])], level=0.95)
    deliveries = [r for r in rows if r.kind is TraceKind.DELIVERY]
    switches = [r for r in rows if r.kind in (TraceKind.PARK, TraceKind.RESUME)]
    epochs, modes = [WARMUP_S], [start_mode]
    for r in switches:
        if r.active != modes[-1]:
            if r.t == epochs[-1]:
                modes[-1] = r.active
            else:
                epochs.append(r.t)
                modes.append(r.active)
    service = np.array([r.service_s for r in rows if r.kind is TraceKind.COMPLETION], dtype=float)
    inp = RefitInput(
        delivery_times=np.array([r.t for r in deliveries]), pages=np.array([r.pages for r in deliveries]),
        modes=np.array([r.active for r in deliveries]), all_modes=(1, 2, 3, 4), search_modes=None,
        service_times=service, sizes_bytes=None, capacity=K, costs=COSTS, mean_useful_life_s=USEFUL_LIFE_S,
        options={"arrivals": "joint", "joint_structure": "auto"}, window=(WARMUP_S, WARMUP_S + seconds),
        mode_changes=(np.asarray(epochs), np.asarray(modes, dtype=np.int64)), hysteresis=0, dwell_s=0.0,
        policy_in_force=RECORDED, observed_cost=(float(est.value), float(est.low), float(est.high)))
    return inp, time.perf_counter() - t0


@dataclass
class Window:
    seed: int
    covered: bool | None          # None: no interval
    check: str
    decision: str                 # adopted / kept / failed
    predicted: float
    interval: tuple[float, float]
    true_cost: float
    phases: int
    structure: str
    seconds: float


def run_window(model: QueueModel, seconds: float, seed: int) -> Window:
    inp, _ = observe(model, seconds, seed)
    t0 = time.perf_counter()
    out = compute_refit(inp)
    wall = time.perf_counter() - t0
    if not out.success or out.result is None:
        fit_check = "misfit" if out.stage.value == "check" else "failed"
        return Window(seed, None, fit_check, "failed", math.nan, (math.nan, math.nan), math.nan, 0, "", wall)
    fit = out.result.fit
    pred = fit.get("predicted") or {}
    iv = pred.get("cost_interval")
    true_cost = float(cost_of(solve(model, out.result.policy).measures, COSTS).total)
    covered = None if not iv or None in iv else bool(iv[0] <= true_cost <= iv[1])
    decision = "kept" if (fit.get("decision") or {}).get("status") == "uncertain" else "adopted"
    joint = fit.get("joint") or {}
    return Window(seed, covered, (fit.get("check") or {}).get("status", "?"), decision,
                  float(pred.get("cost", math.nan)), tuple(iv) if iv else (math.nan, math.nan), true_cost,
                  int(joint.get("phases", 0)), str(joint.get("structure", "")), wall)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def report(case: str, ws: list[Window]) -> None:
    with_iv = [w for w in ws if w.covered is not None]
    k = sum(1 for w in with_iv if w.covered)
    n = len(with_iv)
    lo, hi = clopper_pearson(k, n) if n else (math.nan, math.nan)
    unc = [w for w in with_iv if w.check == "uncertain"]
    k_sure = sum(1 for w in with_iv if w.covered or w.check == "uncertain")
    misfits = sum(1 for w in ws if w.check == "misfit")
    checked = sum(1 for w in ws if w.check in ("ok", "misfit"))
    half = [0.5 * (w.interval[1] - w.interval[0]) / w.predicted for w in with_iv]
    err = [w.predicted / w.true_cost - 1 for w in with_iv]
    below = sum(1 for w in with_iv if w.true_cost < w.interval[0])
    above = sum(1 for w in with_iv if w.true_cost > w.interval[1])
    phases = {p: sum(1 for w in with_iv if w.phases == p) for p in sorted({w.phases for w in with_iv})}
    print(f"{case}: {len(ws)} windows, {n} with an interval: covered {k} of {n} = {k / max(n, 1):.1%} "
          f"[{lo:.1%}, {hi:.1%}] (truth below {below}, above {above}); covered or 'uncertain' {k_sure} of {n}; "
          f"check: {misfits} misfit of {checked} checked ({len(unc)} uncertain); median half-width "
          f"±{float(np.median(half)) if half else math.nan:.1%}; prediction vs truth mean {np.mean(err):+.2%} "
          f"(sd {np.std(err):.2%}); phases {phases}; kept {sum(1 for w in ws if w.decision == 'kept')}; "
          f"refit {np.mean([w.seconds for w in ws]):.2f} s/window", flush=True)


def main() -> int:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        return 0
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    cases = (sys.argv[2] if len(sys.argv) > 2 else "shared:3000,poisson:3000,shared:30000").split(",")
    seed0 = int(os.environ.get("COVERAGE_SEED0", "1000"))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {n} windows per case, seeds "
          f"{seed0}..{seed0 + n - 1}", flush=True)
    for case in cases:
        name, seconds = case.split(":")
        model = truth(name)
        ws = []
        for s in range(seed0, seed0 + n):
            w = run_window(model, float(seconds), s)
            ws.append(w)
            if os.environ.get("COVERAGE_VERBOSE"):
                print(f"  {case} seed {s}: {w}", flush=True)
        report(case, ws)
    return 0


if __name__ == "__main__":
    sys.exit(main())
