"""``robotctl serve``: run the agent as a sidecar until SIGTERM."""

from __future__ import annotations

import os
from typing import Any

from ._args import port
from ._parser import Formatter, lazy

EPILOG = """\
The configuration is YAML (config/sidecar.yaml documents every key); every key can be overridden by an
environment variable ROBOTCTL_<SECTION>_<KEY>, e.g. ROBOTCTL_SERVER_PORT=9000 or
ROBOTCTL_REFIT_INTERVAL_S=60, and the flags below override both. Unknown keys are errors.

Every endpoint but /healthz, /readyz and /metrics needs the bearer token (server.token, server.token_file,
ROBOTCTL_SERVER_TOKEN or ROBOTCTL_SERVER_TOKEN_FILE). Without one the agent refuses to start, unless it
listens on a loopback address and server.insecure_loopback is true. --generate-token makes a token for this
run and prints it once, after the address.

Refits: at start the agent runs policy.startup and refits at growing windows (refit.cold_start_deliveries =
30 deliveries, then 60, 120, 240, ...) until refit.interval_s has passed; below refit.min_deliveries a refit is
a cold-start fit (one-phase model, exact intervals, policy optimised under their pessimistic end). Then it
refits every refit.interval_s and early on drift, each time on the window since a change of the rates it
locates (refit.change_level), else the whole refit.window_s. A policy saved by an earlier run is restored if
younger than refit.warm_max_age_s. GET /v1/policy `origin`: startup | cold | regular | warm.

The first line on standard output is the address the agent listens on (useful with --port 0).
SIGTERM or SIGINT stops it gracefully: stop accepting, tell robots their default state, flush the log.
Exit codes: 0 after a graceful stop, 2 for an invalid configuration (one line naming the key): no token,
a port in use, a host that does not resolve, a log.dir that is a file, a queue.capacity or
refit.max_samples that cannot fit in this machine's memory (with the estimate).

example:
  robotctl serve --config config/sidecar.yaml --port 0 --log-dir var/robotctl --generate-token
  ROBOTCTL_SERVER_TOKEN_FILE=/run/secrets/robotctl-token robotctl serve --config config/sidecar.yaml
  robotctl serve --config config/sidecar.yaml --advise     # shadow mode: advise, never park a robot
  robotctl serve --config config/sidecar.yaml --check --json    # validate and print the configuration
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve", help="run the agent sidecar (HTTP API, delivery log, refits, robot commands)",
        description="Run the agent next to the crawler's robots and indexer: timestamp deliveries, keep "
                    "the delivery log, refit the model and re-optimise the thresholds, and park or resume "
                    "robots.",
        epilog=EPILOG, formatter_class=Formatter)
    p.add_argument("--config", metavar="SIDECAR.yaml", default=os.environ.get("ROBOTCTL_CONFIG"),
                   help="YAML configuration (default: $ROBOTCTL_CONFIG; without one, queue.capacity must "
                        "come from the environment)")
    p.add_argument("--host", help="bind address (overrides server.host)")
    p.add_argument("--port", type=port, metavar="PORT", help="TCP port, 0 for any free port (overrides server.port)")
    p.add_argument("--log-dir", help="delivery log and state directory (overrides log.dir)")
    p.add_argument("--generate-token", action="store_true",
                   help="make a random bearer token for this run and print it once (refused when a token is "
                        "configured)")
    p.add_argument("--advise", action="store_true",
                   help="shadow mode (robots.actuation: advise): fit, optimise and export the desired robots on "
                        "/metrics and /v1/policy, but never park or resume a robot")
    p.add_argument("--check", action="store_true", help="validate the configuration, print it and exit")
    p.add_argument("--json", action="store_true", help="with --check: print the configuration as JSON; "
                   "otherwise: announce the address as a JSON line {\"url\": ...} (and \"token\" with "
                   "--generate-token)")
    p.set_defaults(func=lazy("robotctl.cli._run_serve", "run_serve"))
