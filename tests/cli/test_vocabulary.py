"""Issue 22: one quantity, one flag, in every command; old flags work for a release with a warning; no
abbreviated flags; an unknown flag shows the command's own usage."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

from robotctl.cli import main
from robotctl.cli._main import build_parser
from robotctl.cli._parser import Parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "paper-example.yaml"

#: The command line's vocabulary: every option of every command, with the one quantity it names. A new
#: option must be added here; a quantity that already has a flag must not get a second one.
VOCABULARY = {
    "--all-subsets": "also report every subset of modes (Table 1 of paper 000)",
    "--active": "active robots when a trace does not record them",
    "--advise": "actuation advise: never park or resume a robot",
    "--approx": "cost on the ordered-head ladder when the exact chain is too large",
    "--arrival-rate": "lambda, pages (or packets) offered per second",
    "--arrivals": "a file with the arrival process",
    "--baselines": "also run the baseline fleets",
    "--batch-resolution-s": "deliveries closer than this are one batch (s)",
    "--batches": "number of batches of the batch means",
    "--buffer": "what limits the waiting pages: timers or renovation",
    "--capacity": "K, pages in the system, the one being served included",
    "--censor-above-s": "longer intervals between batches are stops (s)",
    "--certify": "also compute a lower bound / certificate",
    "--change-rates": "page change rates per second",
    "--commands-curve": "print the exact Pareto curve of cost against commands per robot per minute",
    "--check": "validate the configuration and exit",
    "--config": "a configuration file (the sidecar's; demo: the demo's)",
    "--costs": "a file with the cost coefficients",
    "--debug": "tracebacks and debug logs",
    "--duration": "wall-clock seconds of a run",
    "--events": "number of simulated events",
    "--exact": "also solve exactly",
    "--fetch-time": "the fetch-time law",
    "--format": "the input files' format",
    "--from": "start of the replayed time range (s)",
    "--gamma": "the starvation weight of paper 001",
    "--gap-s": "longer intervals without events are gaps (s)",
    "--hysteresis": "search park and resume vectors, not one r(i)",
    "--generate-token": "make a bearer token for this run",
    "--grid": "grid of the buffer-rule search",
    "--horizon-s": "simulated seconds",
    "--host": "bind address",
    "--json": "machine-readable output",
    "--level": "confidence level of the intervals",
    "--log-dir": "delivery log and state directory",
    "--max-length": "longest cycle of a revisit schedule",
    "--max-commands-per-robot-min": "target on park and resume commands per robot per minute",
    "--max-loss": "target on P_loss",
    "--max-obsolete": "target on P_obsolete",
    "--max-period": "longest routing period searched",
    "--max-seconds": "time budget (s)",
    "--max-starvation": "target on P_starvation",
    "--mean-useful-life-s": "mean useful life of a waiting page (s)",
    "--method": "the algorithm a command uses (solver or routing search)",
    "--mode-field": "trace column holding the mode (number of active robots)",
    "--modes": "modes: numbers of active robots",
    "--no-baselines": "do not run the baseline fleets",
    "--option": "paper 004's option when J exceeds the pages waiting",
    "--park": "r_park(0..K) of a hysteresis policy",
    "--policy": "the policy evaluated (r(0..K); schedule: the revisit policy)",
    "--policy-kind": "policy kind: thresholds or mdp",
    "--port": "TCP port",
    "--processing-rate-bps": "indexer bytes per second",
    "--q": "renovation law q_0, q_1, ...",
    "--quiet": "no live view",
    "--red": "RED dropping law",
    "--red-levels": "RED levels searched",
    "--report": "an HTML report file",
    "--resume": "r_resume(0..K) of a hysteresis policy",
    "--robots": "N, robots available",
    "--search": "threshold search method",
    "--seed": "seed of the random numbers",
    "--seed-url": "a real URL to crawl",
    "--service-rate": "mu, pages per second the indexer serves",
    "--service-rates": "service rate of each server",
    "--service-time": "constant service time (s)",
    "--show": "fetches printed",
    "--sort": "sort a trace whose times go backwards",
    "--space": "policy space searched",
    "--to": "end of the replayed time range (s)",
    "--tol": "tolerance",
    "--trace": "a trace file to write",
    "--warmup": "start left out of the measures (simulate: events or seconds; demo: seconds)",
    "--weights": "page weights",
    "--with-timers": "renovation together with obsolescence timers",
    "--workdir": "working directory",
    "--workers": "processes",
    "--yaml": "YAML output",
}

#: Other names people (and earlier releases) give the same quantities: none may be a flag of any command.
SYNONYMS = {
    "--rate": "--arrival-rate", "--lambda": "--arrival-rate", "--arrivals-rate": "--arrival-rate",
    "--places": "--capacity", "--buffer-size": "--capacity", "--size": "--capacity", "-K": "--capacity",
    "--sim-events": "--events", "--simulate": "--events", "--n-events": "--events", "--num-events": "--events",
    "--control": "--policy-kind", "--policy-type": "--policy-kind", "--kind": "--policy-kind",
    "--mu": "--service-rate", "--n-robots": "--robots", "--confidence": "--level", "--random-seed": "--seed",
    "--workers-count": "--workers", "--tolerance": "--tol", "--output-json": "--json",
}

#: Flags whose metavar may differ between commands, and why.
HOMONYMS = {
    "--config": "the sidecar's configuration, except demo's, which is the demo's",
    "--warmup": "simulate counts events or seconds; demo seconds",
    "--policy": "r(0..K) in solve, simulate and buffers; schedule's names the revisit policy served",
}

#: The deprecated aliases of this release: (command, old, new).
DEPRECATED = [("mdp", "--rate", "--arrival-rate"), ("renovation", "--places", "--capacity"),
              ("renovation", "--simulate", "--events"), ("replay", "--sim-events", "--events"),
              ("optimise", "--control", "--policy-kind"), ("optimize", "--control", "--policy-kind")]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"": parser, **sub.choices}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def test_every_option_is_in_the_vocabulary() -> None:
    missing = {(name, s) for name, p in _commands().items() for a in _options(p) for s in a.option_strings
               if s not in VOCABULARY}
    assert not missing, f"declare these options in VOCABULARY (or use the existing flag of the quantity): {missing}"


def test_one_flag_per_quantity() -> None:
    by_quantity: dict[str, list[str]] = defaultdict(list)
    for flag, quantity in VOCABULARY.items():
        by_quantity[quantity].append(flag)
    assert all(len(flags) == 1 for flags in by_quantity.values()), by_quantity


def test_no_command_takes_a_synonym() -> None:
    for name, p in _commands().items():
        taken = set(p._option_string_actions) & set(SYNONYMS)
        assert not taken, f"robotctl {name}: {taken} name quantities whose flag is {[SYNONYMS[s] for s in taken]}"
        for old, alias in getattr(p, "aliases", {}).items():
            assert SYNONYMS.get(old) == alias.new, f"robotctl {name}: deprecated {old} must lead to its one flag"


def test_a_flag_has_one_metavar_in_every_command() -> None:
    metavars: dict[str, set[str]] = defaultdict(set)
    for p in _commands().values():
        for a in _options(p):
            if a.nargs != 0:
                for s in a.option_strings:
                    metavars[s].add(str(a.metavar or a.dest.upper()) if a.choices is None else "{choices}")
    differ = {flag: names for flag, names in metavars.items() if len(names) > 1 and flag not in HOMONYMS}
    assert not differ, differ


def test_every_parser_refuses_abbreviations() -> None:
    assert all(isinstance(p, Parser) and not p.allow_abbrev for p in _commands().values())


@pytest.mark.parametrize(("command", "old", "new"), DEPRECATED)
def test_deprecated_aliases_are_registered(command: str, old: str, new: str) -> None:
    p = _commands()[command]
    assert p.aliases[old].new == new and new in p._option_string_actions  # type: ignore[attr-defined]
    assert old not in " ".join(p.format_help().split()).replace(f"formerly {old}", "")


def test_mdp_rate_still_works_with_one_warning(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["mdp", "--robots", "3", "--capacity", "2", "--gamma", "1", "--json"]
    assert main([*args, "--arrival-rate", "0.5"]) == 0
    new = capsys.readouterr()
    assert main([*args, "--rate", "0.5"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and new.err == ""
    assert old.err.strip().splitlines() == ["robotctl mdp: warning: --rate is deprecated; use --arrival-rate"]


def test_renovation_places_is_capacity_minus_one(capsys: pytest.CaptureFixture[str]) -> None:
    """--places counted the waiting places N; --capacity counts K = N + 1, as in every other command."""
    args = ["renovation", "--arrival-rate", "1.1", "--service-time", "1", "--q", "0.5,0.5", "--json"]
    assert main([*args, "--capacity", "6"]) == 0
    new = capsys.readouterr()
    assert main([*args, "--places=5"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and '"places": 5' in new.out
    assert old.err.count("\n") == 1 and "--places is deprecated; use --capacity" in old.err


def test_renovation_simulate_is_events(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["renovation", "--arrival-rate", "1.1", "--service-time", "1", "--capacity", "3", "--q", "1",
            "--seed", "2", "--json"]
    assert main([*args, "--events", "2000"]) == 0
    new = capsys.readouterr()
    assert main([*args, "--simulate", "2000"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and '"events": 2000' in new.out
    assert old.err.strip() == "robotctl renovation: warning: --simulate is deprecated; use --events"


def test_optimise_control_is_policy_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """The old flag leads to the new one: the same refusal (paper 000's model is no MDP), one warning first."""
    assert main(["optimise", str(EXAMPLE), "--control", "mdp"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "robotctl optimise: warning: --control is deprecated; use --policy-kind"
    assert len(lines) == 2 and "model.obsolescence" in lines[1]


def test_a_deprecated_flag_warns_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):  # --rate twice: the last one wins, as with any flag; one warning
        main(["mdp", "--robots", "3", "--capacity", "2", "--gamma", "1", "--rate", "0.5", "--rate", "x"])
    err = capsys.readouterr().err
    assert err.count("deprecated") == 1 and "--arrival-rate: 'x' is not a number" in err


def test_a_deprecated_flag_after_double_dash_is_not_rewritten() -> None:
    p = _commands()["renovation"]
    assert p._rewrite(["--q", "1", "--", "--places"]) == ["--q", "1", "--", "--places"]  # type: ignore[attr-defined]


def test_abbreviation_is_refused_with_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["optimise", str(EXAMPLE), "--all-subset"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: robotctl optimise ")
    assert err.strip().splitlines()[-1] == ("robotctl optimise: error: unrecognized arguments: --all-subset "
                                            "(did you mean --all-subsets?) (see robotctl optimise --help)")


@pytest.mark.parametrize("command", ["solve", "mdp", "fit", "serve", "simulate", "replay", "demo", "schedule",
                                     "route", "renovation", "buffers"])
def test_an_unknown_flag_shows_the_commands_usage(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--no-such-flag"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: robotctl {command} ")
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"robotctl {command}: error: ") and last.endswith(f"(see robotctl {command} --help)")
    assert "--no-such-flag" in last and "robotctl --help" not in err


def test_a_misspelt_flag_is_reported_by_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse checks required options before unknown ones: the message still comes from the command."""
    with pytest.raises(SystemExit):
        main(["mdp", "--rbots", "3"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("robotctl mdp: error: ") and "robotctl --help" not in last
