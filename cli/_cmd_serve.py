"""``robotctl serve``: run the agent as a sidecar until SIGTERM."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._args import port
from ._parser import Formatter

EPILOG = """\
The configuration is YAML (config/sidecar.yaml documents every key); every key can be overridden by an
environment variable ROBOTCTL_<SECTION>_<KEY>, e.g. ROBOTCTL_SERVER_PORT=9000 or
ROBOTCTL_REFIT_INTERVAL_S=60, and the flags below override both. Unknown keys are errors.

The first line on standard output is the address the agent listens on (useful with --port 0).
SIGTERM or SIGINT stops it gracefully: stop accepting, tell robots their default state, flush the log.
Exit codes: 0 after a graceful stop, 2 for an invalid configuration (one line naming the key).

example:
  robotctl serve --config config/sidecar.yaml --port 0 --log-dir var/robotctl
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
    p.add_argument("--config", metavar="FILE", default=os.environ.get("ROBOTCTL_CONFIG"),
                   help="YAML configuration (default: $ROBOTCTL_CONFIG; without one, queue.capacity must "
                        "come from the environment)")
    p.add_argument("--host", help="bind address (overrides server.host)")
    p.add_argument("--port", type=port, help="TCP port, 0 for any free port (overrides server.port)")
    p.add_argument("--log-dir", help="delivery log and state directory (overrides log.dir)")
    p.add_argument("--advise", action="store_true",
                   help="shadow mode (control.mode: advise): fit, optimise and export the desired robots on "
                        "/metrics and /v1/policy, but never park or resume a robot")
    p.add_argument("--check", action="store_true", help="validate the configuration, print it and exit")
    p.add_argument("--json", action="store_true", help="with --check: print the configuration as JSON; "
                   "otherwise: announce the address as a JSON line {\"url\": ...}")
    p.set_defaults(func=run)




def run(args: argparse.Namespace) -> int:
    from robotctl.agent.config import load_config

    overrides: dict[str, dict[str, Any]] = {}
    if args.host is not None:
        overrides.setdefault("server", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if args.log_dir is not None:
        overrides.setdefault("log", {})["dir"] = args.log_dir
    if args.advise:
        overrides.setdefault("control", {})["mode"] = "advise"
    config = load_config(args.config, overrides=overrides)
    if args.check:
        d = config.to_dict()
        if args.json:
            print(json.dumps(d, indent=2))
        else:
            for section, values in d.items():
                print(f"{section}:")
                for k, v in values.items():
                    print(f"  {k}: {json.dumps(v)}")
        return 0

    from robotctl.agent.app import serve

    def announce(url: str) -> None:
        print(json.dumps({"url": url}) if args.json else f"robotctl: listening on {url}", flush=True)

    import logging

    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("robotctl").setLevel(logging.INFO)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.getLogger("robotctl").addHandler(handler)
        logging.getLogger("robotctl").propagate = False
    serve(config, announce=announce)
    return 0
