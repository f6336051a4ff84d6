"""README.md's commands, run top to bottom on a fresh clone as a new operator would (issue 25).

Every ```sh block of README.md runs, in order, in one bash session (so an `export` carries over to the
blocks after it) with `set -e -o pipefail`: any command that fails fails the test. What is not run:

- a block right after the line ``<!-- readme-test: skip (REASON) -->`` (``make demo``, ``make test`` and the
  Scrapy crawls take minutes; the marker says why);
- blocks of other languages (```python, ```text transcripts).

A `robotctl serve` that is not `--check` runs until stopped: the script starts it in the background, stops
the one started before it (both listen on the same port), waits until its /readyz answers, and stops them
all at the end. The clone has no .venv of its own: it borrows this interpreter's, with the clone's source
first on PYTHONPATH; port 8787 becomes a free one so that the test does not meet a running agent.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"<!-- readme-test: skip \((.+?)\) -->\s*$")
SERVE = re.compile(r"^(?P<cmd>\S*robotctl serve\b(?!.*--check)(?!.*--help)[^#&]*?)\s*&?\s*(?:#.*)?$")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("git") is None or shutil.which("curl") is None
                                 or shutil.which("openssl") is None,
                                 reason="needs git, curl and openssl, as the README does")]


def shell_blocks(text: str) -> list[tuple[int, str | None, str]]:
    """(line number, skip reason or None, body) of every ```sh block, in order."""
    lines = text.splitlines()
    out = []
    k = 0
    while k < len(lines):
        if lines[k].strip() == "```sh":
            start = k + 1
            end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
            m = SKIP.search(lines[k - 1]) if k else None
            out.append((start, m.group(1) if m else None, "\n".join(lines[start:end])))
            k = end
        k += 1
    return out


def script(text: str, port: int) -> str:
    """The bash script that runs README.md's blocks (see the module docstring)."""
    parts = ["set -e -o pipefail",
             "SERVERS=()",
             'stop_servers() { for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null || true; '
             'wait "$p" 2>/dev/null || true; done; SERVERS=(); }',
             "trap stop_servers EXIT",
             f"wait_ready() {{ for _ in $(seq 150); do curl -sf http://127.0.0.1:{port}/readyz >/dev/null && "
             "return 0; sleep 0.2; done; echo 'robotctl serve never became ready' >&2; return 1; }"]
    for line_no, skip, body in shell_blocks(text):
        if skip is not None:
            parts.append(f"# README.md:{line_no}: skipped ({skip})")
            continue
        parts.append(f"echo '== README.md:{line_no}' >&2")
        for line in body.replace("8787", str(port)).splitlines():
            m = SERVE.match(line.strip())
            if m:
                parts.append(f"stop_servers; {m.group('cmd')} & SERVERS+=($!); wait_ready")
            else:
                parts.append(line)
    return "\n".join(parts) + "\n"


def test_the_markers_and_the_serve_lines_are_read_as_meant() -> None:
    """The extraction itself: what is skipped, and which lines start a server."""
    blocks = shell_blocks((ROOT / "README.md").read_text())
    skipped = [body for _, skip, body in blocks if skip]
    assert any("make demo" in b for b in skipped) and any("scrapy-compare" in b for b in skipped)
    assert not any("robotctl serve" in b or "robotctl replay" in b for b in skipped)
    assert SERVE.match(".venv/bin/robotctl serve --config c.yaml &     # listens")
    assert SERVE.match(".venv/bin/robotctl serve --config c.yaml --advise")
    assert not SERVE.match(".venv/bin/robotctl serve --config c.yaml --check  # validates")


def test_the_readmes_commands_run_top_to_bottom_on_a_fresh_clone(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "robotctl"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBOTCTL_")}
    env |= {"PYTHONPATH": str(clone), "ROBOTCTL_SERVER_PORT": str(port), "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1"}
    text = (clone / "README.md").read_text()
    (tmp_path / "readme.sh").write_text(script(text, port))
    out = subprocess.run(["bash", str(tmp_path / "readme.sh")], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    ran = re.findall(r"^== README\.md:(\d+)$", out.stderr, flags=re.MULTILINE)
    assert len(ran) == sum(1 for _, skip, _ in shell_blocks(text) if skip is None), out.stderr[-2000:]
    assert '"actuation": "command"' in out.stdout.replace('"actuation":"command"', '"actuation": "command"'), \
        out.stdout[-2000:]
