"""Reading and replaying long traces (issue 12), measured side by side in one run.

1. ``robotctl fit`` on 10^6 JSON lines, end to end (a fresh process: start-up, reading, fitting, output),
   target 1.5 s; next to it, in-process: the trace reader (msgspec) against the line-by-line reader it
   replaced (the standard library's json), both on the same bytes, and their ratio.
2. ``robotctl replay`` of 10^6 events (the agent's own code on a simulated clock: every event, every
   refit, the comparison's simulations), target 2 minutes; with the events per second and the refits.

Run: .venv/bin/python bench/replay.py [n_lines]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from robotctl.agent import load_model_file, trace  # noqa: E402
from robotctl.agent.config import AgentConfig  # noqa: E402
from robotctl.agent.replay import ReplayOptions, replay  # noqa: E402
from robotctl.agent.sources import read_events  # noqa: E402
from robotctl.agent.trace import TraceEvent  # noqa: E402
from robotctl.model import Simulation, ThresholdPolicy, TraceKind  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_ACTIVE = (TraceKind.DELIVERY, TraceKind.PARK, TraceKind.RESUME)


def simulated_trace(path: Path, n_lines: int, seed: int = 1) -> float:
    """``n_lines`` lines of examples/model.yaml's traffic under the policy 4,4,3,2,1,1; returns the span (s)."""
    model, _ = load_model_file(str(ROOT / "examples" / "model.yaml"))
    sim = Simulation(model, ThresholdPolicy.parse("4,4,3,2,1,1"), np.random.default_rng(seed), record=True)
    written = 0
    last = 0.0
    with open(path, "w", encoding="utf-8") as out:
        while written < n_lines:
            sim.advance(max_events=50_000)
            rows = sim.take_rows()[: n_lines - written]
            out.write("".join(TraceEvent(r.t, r.kind.value, None if r.robot is None else str(r.robot), r.pages, None,
                                         r.service_s, {"active": r.active} if r.kind in _ACTIVE else {}).to_json()
                              + "\n" for r in rows))
            written += len(rows)
            last = rows[-1].t if rows else last
    return last


def main(n_lines: int = 1_000_000) -> int:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; figures are wall time")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        span = simulated_trace(path, n_lines)
        data = path.read_bytes()
        print(f"trace: {n_lines:,} lines, {len(data) / 1e6:.1f} MB, {span / 3600:.1f} simulated hours")

        # 1. reading, then robotctl fit end to end
        t0 = time.perf_counter()
        fast = trace.read_trace_arrays(str(path), extra_fields=("active",), data=data)
        t_fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        slow = trace._slow_arrays(data.decode(), str(path), ("active",), False)
        t_slow = time.perf_counter() - t0
        assert np.array_equal(fast.t, slow.t) and np.array_equal(fast.event, slow.event)
        config = Path(tmp) / "sidecar.yaml"
        config.write_text((ROOT / "examples" / "sidecar.yaml").read_text())
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "robotctl.cli", "fit", str(path), "--config", str(config),
                              "--mode-field", "active", "--json"], capture_output=True, text=True, check=False)
        t_fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import robotctl.cli._run_fit"], check=True)
        t_start = time.perf_counter() - t0
        print(f"\n{f'reading {n_lines:,} lines':42s} {'seconds':>9s} {'x msgspec':>10s}")
        print(f"{'msgspec, typed, columns (robotctl/agent/trace.py)':42s} {t_fast:9.3f} {1.0:10.2f}")
        print(f"{'json line by line (the reader it replaced)':42s} {t_slow:9.3f} {t_slow / t_fast:10.2f}")
        print(f"{'robotctl fit, end to end (exit ' + str(out.returncode) + ')':42s} {t_fit:9.3f} {t_fit / t_fast:10.2f}"
              f"   (target 1.5 s: {'met' if t_fit <= 1.5 else 'MISSED'})")
        print(f"{'  of which interpreter + imports':42s} {t_start:9.3f} {t_start / t_fast:10.2f}")

        # 2. replay of the same events
        cfg = AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": 4,
                                     "costs": {"loss": 5, "obsolescence": 10, "response": 2, "robot": 20,
                                               "starvation": 300},
                                     "refit": {"interval_s": 900, "window_s": 3600, "min_interval_s": 60,
                                               "min_deliveries": 1000},
                                     "fit": {"mean_useful_life_s": None}, "log": {"dir": str(Path(tmp) / "x")}})
        t0 = time.perf_counter()
        table = read_events([str(path)])
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = replay(table, cfg, ReplayOptions(sim_events=400_000))
        t_replay = time.perf_counter() - t0
        print(f"\n{f'replay of {n_lines:,} events':42s} {'seconds':>9s}")
        print(f"{'reading and merging (robotctl/agent/sources.py)':42s} {t_read:9.3f}")
        print(f"{'replay, evaluation included':42s} {t_replay:9.3f}   ({result.events / t_replay:,.0f} events/s; "
              f"target 120 s: {'met' if t_read + t_replay <= 120 else 'MISSED'})")
        fit_s = sum(a.fit_seconds for a in result.attempts)
        solve_s = sum(a.solve_seconds for a in result.attempts)
        print(f"{'refits':42s} {len(result.attempts):9d}   ({len(result.windows)} adopted)")
        print(f"{'  of which fitting (fitting.fit_model)':42s} {fit_s:9.3f}")
        print(f"{'  of which optimising (policies.optimise)':42s} {solve_s:9.3f}")
        for row in result.comparison:
            print(f"  {row.name:<12} J = {row.cost:8.3f}  [{row.ci[0]:.3f}, {row.ci[1]:.3f}]  {row.basis}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
