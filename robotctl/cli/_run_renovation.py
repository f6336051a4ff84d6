"""``robotctl renovation``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from robotctl._json import json_text
from robotctl.model import (
    BMAP,
    PH,
    BufferPolicy,
    Conflict,
    Deterministic,
    MD1NSolution,
    ModeArrivals,
    QueueModel,
    Renovation,
    ThresholdPolicy,
    simulate_buffer,
    solve_md1n,
)

#: (exact value name, estimate name, label)
ROWS = (("loss_probability", "p_loss", "loss probability"),
        ("blocking_probability", "p_blocked", "  blocking"),
        ("renovation_probability", "p_renovated", "  renovation"),
        ("mean_in_system", "mean_queue_length", "mean number in system"),
        ("second_moment", "second_moment_queue_length", "second moment"))


def _simulate(s: MD1NSolution, events: int, seed: int) -> dict[str, Any]:
    lam, N = s.arrival_rate, s.places
    model = QueueModel(N + 1, ModeArrivals.per_mode({1: BMAP((np.array([[-lam]]), np.array([[lam]])))}),
                       PH.exponential(1.0 / s.mean_service))
    sim = simulate_buffer(model, ThresholdPolicy.static(1, N + 1), BufferPolicy(renovation=s.renovation),
                          np.random.default_rng(seed), events=events, service=Deterministic(s.mean_service))
    exact = {est: getattr(s, name) for name, est, _ in ROWS} | {f"P_{i}": p for i, p in enumerate(s.distribution)}
    comparison = sim.check(exact, familywise=True)
    return {"seed": seed, "events": sim.events, "level": 0.99, "familywise_level": comparison.level,
            "all_inside": comparison.all_inside,
            "estimates": {r.name: {"estimate": r.estimate.value, "half_width": r.estimate.half_width,
                                   "inside": r.inside} for r in comparison.rows}}


def _text(s: MD1NSolution, sim: dict[str, Any] | None) -> list[str]:
    lines = [f"M/D/1/N with renovation (paper 004): lambda {s.arrival_rate:g}/s, d {s.mean_service:g} s, "
             f"K = {s.places + 1} (N = {s.places} waiting places), {s.renovation}",
             f"embedded chain at completions: {s.message}; f* = {s.f_star:.6g} s between completions"]
    est = sim["estimates"] if sim is not None else {}
    if sim is not None:
        verdict = "all inside" if sim["all_inside"] else "SOME OUTSIDE"
        lines.append(f"simulated {sim['events']:,} events (seed {sim['seed']}), family-wise "
                     f"{sim['familywise_level']:.4g} intervals: {verdict}")

    def sim_text(name: str) -> str:
        if name not in est:
            return ""
        e = est[name]
        return f"   simulated {e['estimate']:.6g} ± {e['half_width']:.2g}{'' if e['inside'] else '  OUTSIDE'}"

    for name, est_name, label in ROWS:
        lines.append(f"  {label:<24}{getattr(s, name):<12.6g}{sim_text(est_name)}")
    tagged = f"{s.loss_tagged:.12g}" if math.isfinite(s.loss_tagged) else "-"
    eq = "(6)" if s.renovation.conflict is Conflict.KEEP_ONE else "(12), corrected"
    lines.append(f"  1 - 1/(lambda f*)       {s.loss_conservation:.12g}   (conservation; tagged-customer eq. {eq}: "
                 f"{tagged}; largest gap {s.conservation_residual:.2g})")
    lines.append("  distribution P_0..P_{N+1}:")
    for i, p in enumerate(s.distribution):
        lines.append(f"    P_{i:<4}{p:<14.6g}{sim_text(f'P_{i}')}")
    return lines


def run_renovation(args: argparse.Namespace) -> int:
    renovation = Renovation(args.q, Conflict(args.option))
    s = solve_md1n(args.arrival_rate, args.service_time, args.capacity - 1, renovation)
    sim = None
    if args.events is not None:
        seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
        sim = _simulate(s, args.events, seed)
    if args.json:
        out = s.to_dict()
        if sim is not None:
            out["simulation"] = sim
        print(json_text(out, indent=2))
    else:
        print("\n".join(line.rstrip() for line in _text(s, sim)))
    return 0 if s.success else 1


__all__ = ["run_renovation"]
