"""The joint fit of the mode-modulated BMAP (robotctl/fitting/_joint.py, issue 27) on 10^6 batches with
2 phases and 5 modes (targets: a cold fit within 10 s, a warm-started refit within 2 s), printed side by
side with what the same run measures for the present per-mode fit (fit_model on the modes' own clocks)
and one E-step, and each fit's error against the truth: the phase's switching rates, every mode's rates,
and each mode's long-run page rate (where the per-mode fit is biased when modes and phase interact; here
the modes switch independently of the phase, so its long-run rates are right and only the joint fit sees
the shared burst/quiet phase). The warm refit is timed on the window slid on by a tenth of its length (what
the agent refits next) and, for reference, on an independent trace of the same truth. The same cold fit,
E-step and slid warm refit are timed for the ``general`` structure (the default search also fits it).

Run: .venv/bin/python bench/estimation.py [n_batches]
"""

from __future__ import annotations

import math
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import numpy as np  # noqa: E402

from robotctl.fitting import ModeTrajectory, fit_joint, fit_model, joint_data  # noqa: E402
from robotctl.fitting._joint import _e_step  # noqa: E402
from robotctl.fitting._synthetic import shared_phase_switching_trace  # noqa: E402

Q = np.array([[-0.02, 0.02], [0.05, -0.05]])
BASE = np.array([0.3, 3.0])
MODES = 5
PROBS = np.array([0.7, 0.3])


def trace(n_batches: int, seed: int):  # type: ignore[no-untyped-def]
    pi = np.array([Q[1, 0], Q[0, 1]]) / (Q[1, 0] + Q[0, 1])
    mean_rate = float(pi @ BASE) * (MODES + 1) / 2
    rates = np.arange(1, MODES + 1)[:, None] * BASE[None, :]
    return shared_phase_switching_trace(np.random.default_rng(seed), n_batches / mean_rate, Q, rates, PROBS,
                                        switch_rate=1.0)


def window(tr, t0: float, t1: float):  # type: ignore[no-untyped-def]
    """The batches and mode trajectory of ``tr`` in [t0, t1] as JointData (the agent's refit window)."""
    keep = (tr.batch_times >= t0) & (tr.batch_times <= t1)
    first = max(int(np.searchsorted(tr.epochs, t0, side="right")) - 1, 0)
    inside = (tr.epochs > t0) & (tr.epochs <= t1)
    epochs = np.concatenate([[t0], tr.epochs[inside]])
    modes = np.concatenate([[tr.trajectory_modes[first]], tr.trajectory_modes[inside]])
    return joint_data(tr.batch_times[keep], tr.batch_sizes[keep], ModeTrajectory(epochs, modes, end_s=t1))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    tr, tr2 = trace(n, 1), trace(n, 2)
    # the agent's next refit: the window slid on by a tenth of its length (refit.interval_s well under
    # refit.window_s), so the warm start is the estimate on 90% of the same data
    tr_long = trace(int(n * 1.1), 3)
    span = tr_long.seconds / 1.1
    slid_a, slid_b = window(tr_long, 0.0, span), window(tr_long, 0.1 * span, 1.1 * span)
    t0 = time.perf_counter()
    traj = ModeTrajectory(tr.epochs, tr.trajectory_modes, end_s=tr.seconds)
    data = joint_data(tr.batch_times, tr.batch_sizes, traj)
    t_data = time.perf_counter() - t0
    data2 = joint_data(tr2.batch_times, tr2.batch_sizes, ModeTrajectory(tr2.epochs, tr2.trajectory_modes,
                                                                        end_s=tr2.seconds))
    print(f"{tr.batch_times.size} batches, {tr.epochs.size} mode changes, {data.durations.size} pieces, "
          f"{tr.seconds:.0f} s; 2 phases, {MODES} modes (loaded machine: compare the ratios)")
    t0 = time.perf_counter()
    fit = fit_joint(data, phases=2)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = fit.warm_start(data2)
    t_warm = time.perf_counter() - t0
    fit_a = fit_joint(slid_a, phases=2)
    t0 = time.perf_counter()
    warm_slid = fit_a.warm_start(slid_b)
    t_slid = time.perf_counter() - t0
    t0 = time.perf_counter()
    cold_slid = fit_joint(slid_b, phases=2)
    t_cold_slid = time.perf_counter() - t0
    t0 = time.perf_counter()
    _e_step(fit.params, data)
    t_estep = time.perf_counter() - t0
    # the general structure (a BMAP per mode whose batches may move the phase), which fit_model's default
    # search (joint_structure: auto) now fits besides shared and linear
    t0 = time.perf_counter()
    gen = fit_joint(data, phases=2, structure="general")
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    _e_step(gen.params, data)
    t_gen_estep = time.perf_counter() - t0
    gen_a = fit_joint(slid_a, phases=2, structure="general")
    t0 = time.perf_counter()
    gen_slid = gen_a.warm_start(slid_b)
    t_gen_slid = time.perf_counter() - t0
    t0 = time.perf_counter()
    per_mode = fit_model(tr.batch_times, pages=tr.batch_sizes, modes=tr.batch_modes, mode_changes=traj,
                         service_times=np.full(50, 0.2), mean_useful_life_s=60.0, capacity=20,
                         options={"batch_resolution_s": 0.0, "censor_above_s": math.inf})
    t_mm = time.perf_counter() - t0
    print(f"{'step':34s}{'seconds':>10s}{'target':>10s}")
    print(f"{'joint_data (pieces)':34s}{t_data:10.2f}")
    print(f"{'one E-step':34s}{t_estep:10.2f}")
    print(f"{'cold joint fit (' + str(fit.iterations) + ' full-data EM it.)':34s}{t_cold:10.2f}{10.0:10.1f}")
    print(f"{'warm refit, slid window (' + str(warm_slid.iterations) + ' it.)':34s}{t_slid:10.2f}{2.0:10.1f}")
    print(f"{'  its cold fit (' + str(cold_slid.iterations) + ' it.)':34s}{t_cold_slid:10.2f}"
          f"   loglik warm - cold: {warm_slid.loglik - cold_slid.loglik:+.2f}")
    print(f"{'warm refit, independent trace (' + str(warm.iterations) + ')':34s}{t_warm:10.2f}")
    print(f"{'per-mode fit_model (moments)':34s}{t_mm:10.2f}")
    print(f"{'general: one E-step':34s}{t_gen_estep:10.2f}")
    print(f"{'general: cold fit (' + str(gen.iterations) + ' it.)':34s}{t_gen:10.2f}{10.0:10.1f}"
          f"   BIC general - shared: {gen.bic - fit.bic:+.1f}")
    print(f"{'general: warm refit, slid (' + str(gen_slid.iterations) + ' it.)':34s}{t_gen_slid:10.2f}{2.0:10.1f}")
    p = fit.params
    q_err = np.max(np.abs(np.array([p.generator[0, 1], p.generator[1, 0]]) / np.array([Q[0, 1], Q[1, 0]]) - 1))
    rate_err = np.max(np.abs(p.rates / (np.arange(1, MODES + 1)[:, None] * BASE[None, :]) - 1))
    w = warm.params
    wq = np.max(np.abs(np.array([w.generator[0, 1], w.generator[1, 0]]) / np.array([Q[0, 1], Q[1, 0]]) - 1))
    w_rate = np.max(np.abs(w.rates / (np.arange(1, MODES + 1)[:, None] * BASE[None, :]) - 1))
    print(f"joint cold: max rel. error switching rates {q_err:.3f}, rates {rate_err:.3f}; warm: {wq:.3f}, {w_rate:.3f}")
    pi = np.array([Q[1, 0], Q[0, 1]]) / (Q[1, 0] + Q[0, 1])
    print(f"{'mode':>4s}{'true pages/s':>14s}{'joint':>10s}{'per-mode':>10s}{'per-mode c^2':>14s}{'rung':>12s}")
    for li, mode in enumerate(data.modes):
        truth = float(pi @ (BASE * mode)) * float(PROBS @ [1, 2])
        mf = per_mode.modes[li]
        print(f"{mode:4d}{truth:14.4f}{p.page_rate(mode):10.4f}{float(mf.bmap.rate):10.4f}"
              f"{float(mf.bmap.interval_scv):14.3f}{mf.rung:>12s}")


if __name__ == "__main__":
    main()
