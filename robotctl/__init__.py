"""robotctl: a crawler-control agent.

It fits the traffic of a web crawler's robots (a batch Markovian arrival process per number of active
robots, a phase-type service law), solves the finite-buffer queue BMAP/PH/1/K with obsolescence of
waiting pages, and parks or resumes robots at the cost-optimal thresholds.

The layers, each a sub-package (imports point down only; ``make lint`` checks it)::

    robotctl.cli                         the command line
    robotctl.crawler, robotctl.scrapy    a demo crawler; the Scrapy extension
    robotctl.agent                       the asyncio sidecar, its client, trace files
    robotctl.fitting, robotctl.policies  traffic fitting; decisions (pure)
    robotctl.model                       the model core (pure)

This module imports nothing heavy: ``import robotctl`` and ``robotctl --help`` stay instant.
"""

from ._errors import InputError, RobotctlError

__version__ = "0.2.0"

__all__ = ["InputError", "RobotctlError", "__version__"]
