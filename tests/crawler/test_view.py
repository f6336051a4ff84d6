"""The live view: control sequences on a terminal only; periodic plain lines when piped."""

from __future__ import annotations

import io
import re

from robotctl.crawler import LiveView, ViewState

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def state(t: float, *, predicted: bool = True) -> ViewState:
    obs = {"p_loss": 0.1, "p_obsolete": 0.05, "p_starvation": 0.2, "mean_active_robots": 2.1,
           "mean_response_served": 0.3}
    return ViewState(label="robotctl", t=t, duration=60.0, measuring=t > 10, queue=3, capacity=8, agent_queue=3,
                     active=2, robots=3, policy="3,3,3,1,1,1,1,1,1", thresholds="2", policy_source="fit",
                     observed=obs, predicted={k: v * 1.1 for k, v in obs.items()} if predicted else None,
                     cost=20.5, predicted_cost=19.0 if predicted else None, indexed=100, fetched=150, parks=4,
                     resumes=3)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_view_prints_plain_periodic_lines() -> None:
    out = io.StringIO()
    view = LiveView(out, interval_s=3600.0)
    assert not view.interactive
    view.note("== run 1")
    for t in (0.5, 1.0, 1.5):
        view.update(state(t))                 # within one interval: only the first is printed
    view.update(state(2.0), force=True)
    text = out.getvalue()
    assert not CONTROL.search(text.replace("\n", ""))
    lines = text.splitlines()
    assert lines[0] == "== run 1" and len(lines) == 3
    assert lines[1].startswith("[robotctl   0.5/60s warm-up] queue 3/8 (agent 3) active 2/3")
    assert "P_loss=0.100/0.110" in lines[1] and "cost 20.50/19.00" in lines[1]
    assert "P_loss=0.100/-" in LiveView.line(state(20.0, predicted=False))


def test_terminal_view_redraws_in_place() -> None:
    out = Tty()
    view = LiveView(out)
    assert view.interactive
    view.update(state(1.0))
    first = out.getvalue()
    assert "\x1b[" not in first                         # nothing to erase yet
    n = len(LiveView.block(state(1.0)))
    view.update(state(2.0))
    assert f"\x1b[{n}F\x1b[J" in out.getvalue()[len(first):]
    view.finish()
    view.note("done")
    assert out.getvalue().endswith("done\n") and f"\x1b[{n}F" not in out.getvalue()[-20:]


def test_a_disabled_view_is_silent() -> None:
    out = io.StringIO()
    view = LiveView(out, enabled=False)
    view.note("x")
    view.update(state(1.0))
    assert out.getvalue() == ""

