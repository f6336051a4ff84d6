"""Start-up benchmark: what a user waits for before robotctl does anything.

Side by side in one run, each the best of ``--repeat`` fresh interpreters (the machine's noise only
adds time, so the minimum is the figure):

- a bare ``python -c pass`` (the baseline every other row is measured against);
- ``robotctl --help`` and ``robotctl CMD --help`` for every command (target: within 0.25 s of the bare
  interpreter, issue 10);
- ``import robotctl.agent.client`` (what a Python crawler imports; it must not pull numpy or scipy),
  ``import robotctl.model`` and ``import robotctl.agent.app`` for scale.

Each row says which heavy modules the import loaded. Usage: python bench/startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
HEAVY = ("numpy", "scipy", "scipy.stats", "scipy.sparse", "aiohttp", "yaml", "prometheus_client")
TARGET_S = 0.25


def best_of(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def loaded_by(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else ["?"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7, help="fresh interpreters per row (the best is kept)")
    args = ap.parse_args()
    from robotctl.cli._main import COMMAND_MODULES

    commands = [m.rsplit("_cmd_", 1)[1] for m in COMMAND_MODULES]
    commands = [c for m in commands for c in (("solve", "optimise") if m == "model" else (m,))]
    base = best_of([sys.executable, "-c", "pass"], args.repeat)
    rows: list[tuple[str, list[str], str]] = [("robotctl --help", [str(BIN / "robotctl"), "--help"],
                                               "from robotctl.cli import build_parser; build_parser()")]
    for c in commands:
        rows.append((f"robotctl {c} --help", [str(BIN / "robotctl"), c, "--help"],
                     "from robotctl.cli import build_parser; build_parser()"))
    for mod in ("robotctl.agent.client", "robotctl.model", "robotctl.agent.app"):
        rows.append((f"import {mod}", [sys.executable, "-c", f"import {mod}"], f"import {mod}"))
    print(f"bare interpreter (python -c pass): {base:.3f} s, best of {args.repeat}")
    print(f"{'what':<34}{'seconds':>9}{'beyond bare':>13}{'x bare':>8}  target   heavy modules loaded")
    for label, cmd, code in rows:
        t = best_of(cmd, args.repeat)
        extra = t - base
        heavy = loaded_by(code)
        target = "" if not label.startswith("robotctl") else ("met" if extra <= TARGET_S else "MISSED")
        if label == "import robotctl.agent.client":  # the target: no numpy, no scipy
            target = "met" if not {"numpy", "scipy"} & set(heavy) else "MISSED"
        print(f"{label:<34}{t:>9.3f}{extra:>13.3f}{t / base:>8.1f}  {target:<7}  {', '.join(heavy) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
