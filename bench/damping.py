"""Damping's price (issue 16): park/resume commands per robot per minute against the cost J of paper 000
eq. (2), for hysteresis bands and dwell times, measured in the simulator through the agent's own decision
and actuator (``agent.damping.simulate_damping``) with the same random numbers for every setting.

Three cases: the paper example (4 robots, K = 5), ``fleet_model(16, 50)`` (the demo's size) and the model
fitted to a demo crawl (``config/demo-fitted.yaml``), each at its threshold optimum. Target of the issue:
at most 6 commands per robot per minute within 2% of undamped cost. The last column says which settings
meet it; ``auto`` shows what ``robots.hysteresis: auto`` and ``robots.dwell_s: auto`` choose from 20,000
events, as a refit does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from robotctl.agent import load_model_file
from robotctl.agent.damping import DWELL_COST_TOLERANCE, DWELL_STEPS, choose_damping, event_time_s, simulate_damping
from robotctl.model import Costs, QueueModel, fleet_model
from robotctl.policies import optimise

ROOT = Path(__file__).resolve().parents[1]
TARGET_COMMANDS = 6.0


def cases() -> dict[str, tuple[QueueModel, Costs]]:
    return {"paper example (4 robots, K = 5)": load_model_file(str(ROOT / "config" / "paper-example.yaml")),
            "fleet_model(16, 50)": fleet_model(16, 50, obsolescence="exponential"),
            "demo-fitted (3 robots, K = 8)": load_model_file(str(ROOT / "config" / "demo-fitted.yaml"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000, help="simulated events per setting")
    args = parser.parse_args()
    for name, (model, costs) in cases().items():
        best = optimise(model, costs).best
        unit = event_time_s(best.measures)
        print(f"== {name}: optimum {best.policy}, exact J = {best.cost.total:.3f}; one mean time between "
              f"queue events {unit * 1e3:.2f} ms; {args.events:,} events per setting")
        print(f"   {'hysteresis':>10s} {'dwell s':>9s} {'J':>9s} {'+-':>6s} {'vs r(i)':>8s} {'cmds/robot/min':>15s}"
              f"  within 2%, <= {TARGET_COMMANDS:g}/min")
        t0 = time.perf_counter()
        base = None
        settings = [(h, 0.0) for h in (0, 1, 2, 3, 4, 6, 8) if h < best.policy.capacity]
        settings += [(0, k * unit) for k in DWELL_STEPS]
        for h, dwell in settings:
            run = simulate_damping(model, costs, best.policy, dwell_s=dwell, max_commands_per_min=0, hysteresis=h,
                                   events=args.events, seed=1)
            base = base or run
            rel = run.cost / base.cost
            within = rel <= DWELL_COST_TOLERANCE
            meets = "both" if within and run.commands_per_robot_per_min <= TARGET_COMMANDS else (
                "cost only" if within else "")
            print(f"   {h:10d} {dwell:9.4f} {run.cost:9.3f} {run.cost_half_width:6.3f} {100 * (rel - 1):+7.1f}% "
                  f"{run.commands_per_robot_per_min:15.1f}  {meets}")
        choice = choose_damping(model, costs, best.policy, best.measures)
        print(f"   auto (20,000 events): hysteresis {choice.hysteresis}, dwell {choice.dwell_s:.4f} s -> "
              f"{choice.chosen.commands_per_robot_per_min:.1f} commands/robot/min at "
              f"{100 * (choice.chosen.cost / choice.undamped.cost - 1):+.1f}% "
              f"(r(i) exactly: {choice.undamped.commands_per_robot_per_min:.1f}); "
              f"{time.perf_counter() - t0:.1f} s for the case\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
