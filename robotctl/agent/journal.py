"""The agent's side of the delivery log: lines written at once (the walk of a delivery) or held until the
end of the step that made them (park, resume and policy lines, which follow the change they record).

The lines themselves come from :class:`agent.trace.TraceWriter`, beside their reader.
"""

from __future__ import annotations

import logging

from .log import DeliveryLog, DiscardLog
from .trace import TraceWriter

LOG = logging.getLogger("robotctl.agent")


class Journal:
    """Writes :class:`TraceWriter` lines to the log; see the module docstring."""

    def __init__(self, log: DeliveryLog | DiscardLog) -> None:
        self.log = log
        self.lines = TraceWriter()
        self._pending: list[str] = []
        #: a park/resume line of the current change of mode is pending
        self.mode_line_pending = False

    def write(self, text: str) -> None:
        """Append now; an error propagates (nothing has changed yet)."""
        self.log.append(text.encode())

    def defer(self, text: str, *, mode_line: bool = False) -> None:
        """Hold a line until :meth:`flush`; ``mode_line`` marks it as recording the current change of mode."""
        self._pending.append(text)
        if mode_line:
            self.mode_line_pending = True

    def flush(self) -> None:
        """Write the held lines (an error is logged: the change they record has happened)."""
        self.mode_line_pending = False
        if not self._pending:
            return
        data = "".join(self._pending).encode()
        self._pending.clear()
        try:
            self.log.append(data)
        except OSError as exc:
            LOG.error("event=log_write_failed what=park_resume error=%s", exc)

    def refit(self, now: float, reason: str) -> None:
        """A refit's cut (an error is logged: the refit goes on)."""
        try:
            self.write(self.lines.refit(now, reason))
        except OSError as exc:
            LOG.error("event=log_write_failed what=refit error=%s", exc)


__all__ = ["Journal"]
