"""Issue 11, finding 9: broken files and absurd arguments end in one line and exit 2, never a traceback or a
hang. Each case was a traceback (or a hang, or a late MemoryError) before."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from robotctl.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "k9Vb2-Qx7_Lm4Ns8Tp1Wz"
BASE = "[[[-2, 0], [0, -2]], [[1, 1], [1, 1]]]"


def _model(arrivals: str, *, capacity: int = 3, extra: str = "costs: {loss: 1, robot: 1}\n") -> str:
    return f"model:\n  capacity: {capacity}\n  arrivals: {arrivals}\n  service: {{rate: 1}}\n{extra}"


def one_line_exit_2(code: int, err: str, field: str) -> None:
    """The contract of docs/ARCHITECTURE.md: exit 2, one line on standard error that names the field."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("robotctl: error: "), err
    assert "Traceback" not in err
    assert field in lines[0], (field, err)


MODEL_CASES = [
    # (id, model file text, field named)
    ("base_mode_text", _model(f"{{rule: linear, base: {BASE}, modes: [1, 2], base_mode: x}}"), "base_mode"),
    ("base_mode_fraction", _model(f"{{rule: linear, base: {BASE}, modes: [1, 2], base_mode: 1.5}}"), "base_mode"),
    ("base_mode_zero", _model(f"{{rule: linear, base: {BASE}, modes: [1, 2], base_mode: 0}}"), "base_mode"),
    ("q_text", _model(f"{{rule: thinning, base: {BASE}, q: abc}}"), "model.arrivals.q"),
    ("q_list_of_text", _model(f"{{rule: thinning, base: {BASE}, q: [abc]}}"), "model.arrivals.q"),
    ("q_number", _model(f"{{rule: thinning, base: {BASE}, q: 1}}"), "model.arrivals.q"),
    ("independent_robots_number", _model("{rule: independent, robots: 5}"), "model.arrivals.robots"),
    ("independent_too_many_phases", _model(f"{{rule: independent, robots: [{', '.join([BASE] * 16)}]}}"),
     "model.arrivals.robots"),
    ("marked_robots_number", _model("{rule: marked, D0: [[-1]], robots: 5}"), "model.arrivals.robots"),
    ("marked_robot_number", _model("{rule: marked, D0: [[-1]], robots: [5]}"), "model.arrivals.robots[0]"),
    ("marked_D0_text", _model("{rule: marked, D0: x, robots: [[[[1]]]]}"), "model.arrivals.D0"),
    ("marked_shape_mismatch", _model("{rule: marked, D0: [[-2, 1], [1, -2]], robots: [[[[1]]]]}"),
     "model.arrivals.robots[0]"),
    ("modes_text", _model(f"{{rule: linear, base: {BASE}, modes: x}}"), "model.arrivals.modes"),
    ("capacity_huge", _model(f"{{per_mode: {{1: {BASE}}}}}", capacity=10**9), "model.capacity"),
    ("capacity_text", _model(f"{{per_mode: {{1: {BASE}}}}}").replace("capacity: 3", "capacity: lots"),
     "model.capacity"),
    ("service_rate_infinite", _model(f"{{per_mode: {{1: {BASE}}}}}").replace("{rate: 1}", "{rate: .inf}"),
     "model.service"),
    ("yaml_alias_bomb", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join(['*' + chr(97 + k)] * 9)}]\n" for k in range(8)) +
     _model(f"{{per_mode: {{1: {BASE}}}}}"), "model.yaml"),
]


@pytest.mark.parametrize(("text", "field"), [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES])
@pytest.mark.parametrize("command", ["solve", "optimise"])
def test_bad_model_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str,
                         field: str) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    args = [command, str(path)] + (["--policy", "1,1,1,1"] if command == "solve" else [])
    code = main(args)
    one_line_exit_2(code, capsys.readouterr().err, field)


def test_a_capacity_whose_evaluation_cannot_fit_in_memory_is_refused_at_once_with_the_estimate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """K = 10^9: K + 1 levels do not fit in memory, exactly or approximately (it was a traceback)."""
    path = tmp_path / "model.yaml"
    path.write_text((ROOT / "config" / "paper-example.yaml").read_text().replace("capacity: 5", "capacity: 1000000000"))
    assert "capacity: 1000000000" in path.read_text()
    for args in (["optimise", str(path)], ["solve", str(path), "--policy", "3,1"],
                 ["solve", str(path), "--policy", "3,1", "--approx"]):
        code = main(args)
        err = capsys.readouterr().err
        one_line_exit_2(code, err, "model.capacity")
        assert "memory" in err and "states" in err


def test_an_exact_chain_past_the_solver_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """K = 10^4 with two obsolescence phases that do not lump: R^(K-1) states per level (it was a MemoryError
    after 30 s); the solver refuses it and points at the approximation."""
    text = (ROOT / "config" / "paper-example.yaml").read_text().replace("capacity: 5", "capacity: 10000")
    text = text.replace("[[-0.6, 0.4], [0.1, -0.3]]", "[[-0.9, 0.4], [0.1, -0.3]]")  # unequal exit rates
    path = tmp_path / "model.yaml"
    path.write_text(text)
    assert "capacity: 10000" in text and "-0.9" in text
    policy = ",".join(["3"] * 5000 + ["1"] * 5001)
    one_line_exit_2(main(["solve", str(path), "--policy", policy]), capsys.readouterr().err, "model")


@pytest.mark.parametrize(("data", "name"), [
    (bytes(range(256)) * 8, "binary"),
    (b'{"t": 1, "event": "delivery"}\n\xff\xfe{"t": 2}\n', "bad_utf8_line"),
    (b"\x00" * 100, "nul_bytes"),
], ids=["binary", "bad_utf8_line", "nul_bytes"])
def test_fit_on_a_file_that_is_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes,
                                        name: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(data)
    one_line_exit_2(main(["fit", str(path), "--capacity", "5"]), capsys.readouterr().err, path.name)


@pytest.mark.parametrize("modes", ["1-100000", "1-1000000000", "0-5000"])
def test_fit_modes_beyond_any_fleet_are_refused_while_parsing(capsys: pytest.CaptureFixture[str], modes: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fit", "trace.jsonl", "--modes", modes])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "--modes" in err


def test_a_broken_demo_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text("demo:\n  seed: [1\n  x: 2\n")
    one_line_exit_2(main(["demo", "--config", str(path)]), capsys.readouterr().err, "line 3")


# -- robotctl serve: the start-up failures, each a real process (they used to be tracebacks) -----------------
def _serve(tmp_path: Path, *args: str, config: str = "", env: dict[str, str] | None = None,
           timeout: float = 60.0) -> tuple[int, str]:
    path = tmp_path / "agent.yaml"
    path.write_text(config or f"queue: {{capacity: 5}}\nlog: {{dir: {tmp_path / 'log'}}}\n")
    full_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", ROBOTCTL_SERVER_TOKEN=TOKEN, **(env or {}))
    full_env.pop("ROBOTCTL_CONFIG", None)
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(path), *args],
                         capture_output=True, text=True, env=full_env, cwd=tmp_path, timeout=timeout)
    return out.returncode, out.stderr


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def test_serve_on_a_port_in_use(tmp_path: Path) -> None:
    sock, port = _busy_port()
    with sock:
        code, err = _serve(tmp_path, "--port", str(port))
    one_line_exit_2(code, err, "server.port")
    assert "in use" in err


def test_serve_on_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    code, err = _serve(tmp_path, "--host", "no-such-host.invalid", "--port", "0")
    one_line_exit_2(code, err, "server.host")


@pytest.mark.parametrize("check", [False, True])
def test_serve_with_a_log_dir_that_is_a_file(tmp_path: Path, check: bool) -> None:
    (tmp_path / "afile").write_text("x")
    code, err = _serve(tmp_path, "--port", "0", "--log-dir", str(tmp_path / "afile"), *(["--check"] if check else []))
    one_line_exit_2(code, err, "log.dir")


SERVE_CHECK_CASES: list[tuple[str, str, Callable[[str], bool]]] = [
    ("queue: {capacity: 1000000000}\n", "queue.capacity", lambda e: "memory" in e),
    ("queue: {capacity: 5}\nrefit: {max_samples: 1.0e+10}\n", "refit.max_samples", lambda e: "memory" in e),
    ("queue: {capacity: 5}\nserver: {host: 0.0.0.0}\n", "server.token", lambda e: "ROBOTCTL_SERVER_TOKEN" in e),
]


@pytest.mark.parametrize(("config", "field", "says"), SERVE_CHECK_CASES, ids=["K", "max_samples", "no_token"])
def test_serve_check_refuses_what_the_start_would_die_of(tmp_path: Path, config: str, field: str,
                                                          says: Callable[[str], bool]) -> None:
    env = {"ROBOTCTL_SERVER_TOKEN_FILE": str(tmp_path / "nothing")} if field == "server.token" else {}
    if field == "server.token":  # no token at all: neither the variable nor a file
        code, err = _serve_without_token(tmp_path, config + f"log: {{dir: {tmp_path / 'log'}}}\n")
    else:
        code, err = _serve(tmp_path, "--check", config=config + f"log: {{dir: {tmp_path / 'log'}}}\n", env=env)
    one_line_exit_2(code, err, field)
    assert says(err), err


def _serve_without_token(tmp_path: Path, config: str) -> tuple[int, str]:
    path = tmp_path / "agent.yaml"
    path.write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBOTCTL_")}
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(path), "--check"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    return out.returncode, out.stderr


def test_reject_batch_with_a_batch_size_that_never_comes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Found by the fuzzing: mode 4 of paper 000's example has batches of 1 and 4 pages only; with reject-batch
    admission at K = 2 the level chain indexed past its arrival sums (a traceback from optimise)."""
    path = tmp_path / "model.yaml"
    path.write_text((ROOT / "config" / "paper-example.yaml").read_text().replace("capacity: 5", "capacity: 2")
                    .replace("admission: partial", "admission: reject-batch"))
    assert "reject-batch" in path.read_text()
    assert main(["optimise", str(path), "--modes", "4,1"]) == 0, capsys.readouterr().err


# -- issue 23, defect 9: serve --check catches what would fail after the start ---------------------------------
_BASE = ("queue: {capacity: 5}\nserver: {insecure_loopback: true}\n"
         "costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n")
LATER_CASES = [
    ("fit: {options: {warp: 9}}\n", {}, "fit.options.warp"),
    ("fit: {options: {significance: 7}}\n", {}, "fit.options.significance"),
    ("revisit: {pages: /nonexistent.csv}\n", {}, "revisit.pages"),
    ("server: {insecure_loopback: true, max_connections: 1000000000}\n", {}, "server.max_connections"),
    ("policy: {startup: 0}\n", {}, "policy.startup"),
    ("policy: {startup: [0, 1, 1, 1, 1, 1]}\n", {}, "policy.startup"),
    ("refit: {window_s: 60}\nrefit: {window_s: 90}\n", {}, "agent.yaml"),
    ("queue: {capacity: 5, capacity: 6}\n", {}, "agent.yaml"),
    ("", {"ROBOTCTL_FOO_BAR": "1"}, "ROBOTCTL_FOO_BAR"),
]


@pytest.mark.parametrize(("extra", "env", "field"), LATER_CASES,
                         ids=["fit_option", "fit_option_value", "pages", "max_connections", "startup_0",
                              "startup_r0", "dup_section", "dup_key", "env_section"])
def test_serve_check_refuses_what_would_fail_after_the_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, extra: str,
        env: dict[str, str], field: str) -> None:
    path = tmp_path / "agent.yaml"
    text = _BASE + extra + f"log: {{dir: {tmp_path / 'log'}}}\n"
    for section in ("queue", "server"):
        if extra.startswith(section + ":"):  # the case's own line stands for the base's
            text = "\n".join(line for line in text.splitlines() if not line.startswith(section + ":")) + "\n"
            text = extra + text
    path.write_text(text)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    one_line_exit_2(main(["serve", "--check", "--config", str(path)]), capsys.readouterr().err, field)


def test_serve_check_refuses_all_zero_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(f"queue: {{capacity: 5}}\nserver: {{insecure_loopback: true}}\nlog: {{dir: {tmp_path}}}\n")
    one_line_exit_2(main(["serve", "--check", "--config", str(path)]), capsys.readouterr().err, "costs")


def test_yaml_numbers_with_an_exponent_are_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``2e6`` is a string to YAML 1.1; the config (file and environment) reads it as the number it means."""
    path = tmp_path / "agent.yaml"
    path.write_text(_BASE + f"log: {{dir: {tmp_path}, max_bytes: 2e6}}\nrefit: {{window_s: 3e3}}\n")
    monkeypatch.setenv("ROBOTCTL_REFIT_INTERVAL_S", "6e1")
    assert main(["serve", "--check", "--json", "--config", str(path)]) == 0
    import json as _json
    doc = _json.loads(capsys.readouterr().out)
    assert (doc["log"]["max_bytes"], doc["refit"]["window_s"], doc["refit"]["interval_s"]) == (2_000_000, 3000, 60)


# -- issue 23, defect 7: every size typed is checked before the work starts -------------------------------------
SIZE_CASES = [
    (["mdp", "--robots", "10000000", "--capacity", "5", "--arrival-rate", "0.1", "--gamma", "1"], "--robots"),
    (["mdp", "--robots", "16", "--capacity", "10000000", "--arrival-rate", "0.1", "--gamma", "1"], "--capacity"),
    (["route", "--arrival-rate", "1.5", "--service-rates", "1,5", "--max-period", "1000000000"], "--max-period"),
    (["renovation", "--arrival-rate", "1.1", "--service-time", "1", "--capacity", "100000001", "--q", "1"],
     "--capacity"),
    (["buffers", str(ROOT / "config" / "paper-example.yaml"), "--policy", "3,3,3,1,1,1", "--grid", "1000000000"],
     "--grid"),
    (["optimise", str(ROOT / "config" / "paper-example.yaml"), "--workers", "100000"], "--workers"),
    (["fit", "x.jsonl", "--capacity", "9" * 5000], "--capacity"),
]


@pytest.mark.parametrize(("argv", "flag"), SIZE_CASES, ids=[c[0][0] + c[1] for c in SIZE_CASES])
def test_a_size_beyond_the_machine_is_refused_before_work(argv: list[str], flag: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1 and flag in lines[0], err
    assert len(lines[0]) < 400, err  # a 5,000-digit number is not echoed whole
    if flag in ("--robots", "--capacity", "--max-period") and "digits" not in err:
        assert "would take about" in err, err  # the estimate


def test_numbers_past_pythons_digit_limit_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = "9" * 5000
    trace = tmp_path / "t.jsonl"
    trace.write_text(f'{{"t": 1.0, "event": "delivery", "pages": {big}}}\n'
                     + "".join(f'{{"t": {i}.0, "event": "delivery"}}\n' for i in range(2, 40)))
    one_line_exit_2(main(["fit", str(trace), "--capacity", "5"]), capsys.readouterr().err, "t.jsonl:1")
    model = tmp_path / "m.yaml"
    model.write_text((ROOT / "config" / "paper-example.yaml").read_text().replace("capacity: 5", f"capacity: {big}"))
    one_line_exit_2(main(["solve", str(model), "--policy", "3,3,3,1,1,1"]), capsys.readouterr().err, "m.yaml")


def test_a_gzip_bomb_is_refused_while_it_expands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip
    import tracemalloc

    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\n" * (200 << 20), 9))  # 200 MiB of newlines in about 200 KB
    tracemalloc.start()
    code = main(["fit", str(bomb), "--capacity", "5"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    one_line_exit_2(code, capsys.readouterr().err, "bomb.jsonl.gz")
    assert peak < 150 << 20, peak  # stopped at the bound (about 56 MiB), not after 200 MiB


def test_a_real_gzip_trace_still_reads(tmp_path: Path) -> None:
    import gzip

    from robotctl.agent.trace import read_trace_bytes

    text = "".join(f'{{"t": {i * 0.37:.2f}, "event": "delivery", "pages": 1}}\n' for i in range(200_000)).encode()
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(text[: len(text) // 2]) + gzip.compress(text[len(text) // 2:]))  # two members
    assert read_trace_bytes(str(path)) == text
