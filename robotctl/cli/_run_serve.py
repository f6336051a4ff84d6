"""``robotctl serve``: what it runs (imported when it runs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import secrets
import sys
from typing import Any

from robotctl import InputError
from robotctl._json import json_text
from robotctl.agent import AgentConfig, check_config_memory, check_directory, load_config

#: Random bytes of a generated token (43 URL-safe characters).
TOKEN_BYTES = 32


def checked_config(args: argparse.Namespace) -> tuple[AgentConfig, str | None]:
    """The configuration of ``args`` checked as the start would find it, and the generated token if any.

    Every problem is an :class:`InputError` of one line: an invalid key, no token where one is needed, a
    log directory that cannot be one, a capacity or sample count that cannot fit in memory.
    """
    overrides: dict[str, dict[str, Any]] = {}
    if args.host is not None:
        overrides.setdefault("server", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if args.log_dir is not None:
        overrides.setdefault("log", {})["dir"] = args.log_dir
    if args.advise:
        overrides.setdefault("robots", {})["actuation"] = "advise"
    config = load_config(args.config, overrides=overrides)
    generated = None
    if args.generate_token:
        if config.server.token is not None:
            raise InputError("--generate-token", "a token is already configured (server.token, server.token_file "
                             "or ROBOTCTL_SERVER_TOKEN)", "drop --generate-token, or the configured token")
        generated = secrets.token_urlsafe(TOKEN_BYTES)
        config = dataclasses.replace(config, server=dataclasses.replace(config.server, token=generated))
    config.server.check_exposure()
    check_directory(config.log.dir, create=not args.check)
    check_config_memory(config)
    check_what_fails_later(config, strict=args.check)
    return config, generated


def check_what_fails_later(config: AgentConfig, *, strict: bool = True) -> None:
    """What a valid configuration can still hold that would fail after the start, checked before it: the
    page list of ``revisit.pages`` (read), and costs that are all zero without targets (every policy would
    cost J = 0, so the refits would choose at random: an error for ``--check``; a start without costs is
    allowed, to watch the traffic first)."""
    if config.revisit.pages is not None:
        from robotctl.agent import read_pages

        try:
            read_pages(config.revisit.pages)
        except InputError as exc:
            raise exc.within("revisit.pages") from exc
    if strict and config.targets.as_targets() is None and not any(config.costs.to_dict().values()):
        raise InputError("costs", "are missing (or all zero), so every policy costs J = 0 and a refit could "
                         "not tell them apart", "set costs: {loss, obsolescence, response, robot, starvation} "
                         "(config/sidecar.yaml), or targets:")


def _print_config(config: AgentConfig, as_json: bool) -> None:
    d = config.to_dict()
    if as_json:
        print(json_text(d, indent=2))
        return
    for section, values in d.items():
        print(f"{section}:")
        for k, v in values.items():
            print(f"  {k}: {json.dumps(v)}")


def _log_to_stderr() -> None:
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("robotctl").setLevel(logging.INFO)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.getLogger("robotctl").addHandler(handler)
        logging.getLogger("robotctl").propagate = False


def run_serve(args: argparse.Namespace) -> int:
    config, generated = checked_config(args)
    if args.check:
        _print_config(config, args.json)
        return 0

    from robotctl.agent import serve

    def announce(url: str) -> None:
        """The address on the first line; a generated token once, and only here."""
        if args.json:
            print(json.dumps({"url": url, **({"token": generated} if generated else {})}), flush=True)
            return
        print(f"robotctl: listening on {url}", flush=True)
        if generated:
            print(f"robotctl: token (shown once; robots send Authorization: Bearer <token>): {generated}",
                  flush=True)

    _log_to_stderr()
    serve(config, announce=announce)
    return 0


__all__ = ["TOKEN_BYTES", "check_what_fails_later", "checked_config", "run_serve"]
