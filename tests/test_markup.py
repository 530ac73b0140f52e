"""No user text is markup, and no number is too big to be bad input (issue 21 item 4).

Paths, ``--set`` values, scenario names and stored values holding ``[/x]`` or ``[bold]``
print verbatim; bad ones are exit 2, never 1 (a filesystem finding) and never a traceback.
Each case runs the real command in a child process, as a user meets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import errors
from harness.cli import main as cli
from harness.store.db import RunKind, RunStatus, Store

REPO = Path(__file__).resolve().parent.parent
NAME = "ext2-fsync"
MARKUP = ("[/x]", "[bold]", "[bold red]b[/]")


def scenario(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Wide: the message is checked as one line.
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "COLUMNS": "500", **env},
    )


def assert_bad_input(r: subprocess.CompletedProcess[str], *verbatim: str) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == errors.EXIT_INPUT, r.stderr
    for text in verbatim:
        assert text in r.stderr, (text, r.stderr)


@pytest.mark.parametrize("name", ["x[/y].sqlite", "[bold]x.sqlite", "[/]"])
def test_db_path_is_text(tmp_path: Path, name: str) -> None:
    db = tmp_path / name
    assert_bad_input(scenario("results", "runs", "--db", str(db)), str(db))


def test_stored_values_are_text(tmp_path: Path) -> None:
    """A store at a bracketed path, a run whose scenario, params and error are markup."""
    db = tmp_path / "[bold]d[/x]" / "lab.sqlite"  # "/" in "[/x]": two directories
    db.parent.mkdir(parents=True)
    with Store.open(db) as st:
        run_id = st.begin_run("[bold]sc[/x]", RunKind.CRASH, {"k[/]": "[red]v[/x]"}, 7, fs="ext4")
        st.finish_run(run_id, RunStatus.FAILED, {"error": "boom [/x] [bold]"})
    r = scenario("results", "runs", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert "[bold]sc[/x]" in r.stdout and str(db) in r.stdout
    r = scenario("results", "show", run_id, "--db", str(db))
    assert r.returncode == 0, r.stderr
    for text in ("[bold]sc[/x]", "k[/]", '"[red]v[/x]"', "boom [/x] [bold]"):
        assert text in r.stdout, (text, r.stdout)


@pytest.mark.parametrize("value", MARKUP)
def test_set_value_is_text(value: str) -> None:
    r = scenario("show", NAME, "--set", f"fs.type=x{value}")
    assert_bad_input(r, f"fs.type='x{value}'", "not one of")


def test_set_key_is_text() -> None:
    assert_bad_input(scenario("show", NAME, "--set", "[bold]k[/x]=1"), "'[bold]k[/x]'")


def bracketed_scenario(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "[bold]dir[/x]"
    d.mkdir(parents=True)
    path = d / "[red]sc[x].toml"
    path.write_text(body)
    return path


def test_scenario_at_a_bracketed_path(tmp_path: Path) -> None:
    path = bracketed_scenario(
        tmp_path, 'description = "d [/x]"\n[fs]\ntype = "[bold]ext9[/x]"\ndisk_size = "64M"\n'
    )
    for cmd in ("show", "run"):
        r = scenario(cmd, str(path))
        assert_bad_input(r, str(path), "'[bold]ext9[/x]'")


def test_scenario_name_in_a_late_error(tmp_path: Path) -> None:
    """A valid scenario whose name is markup reaches `run`'s --set check."""
    path = bracketed_scenario(tmp_path, 'description = "d"\n[fs]\ntype = "ext2"\n')
    assert scenario("show", str(path)).returncode == 0
    r = scenario("run", str(path), "--set", "check.timeout=inf")
    assert_bad_input(r, str(path), "check.timeout=inf")


def test_scenario_list_shows_names_and_errors_as_text(tmp_path: Path) -> None:
    (tmp_path / "[bold]ok.toml").write_text('description = "a [red]desc[/]"\n[fs]\ntype = "ext2"\n')
    (tmp_path / "[red]bad[x].toml").write_text('description = "d"\n[fs]\ntype = "[/x]"\n')
    r = scenario("list", CRASHLAB_SCENARIOS=str(tmp_path))
    assert r.returncode == errors.EXIT_INPUT and "Traceback" not in r.stderr, r.stderr
    for text in ("[bold]ok", "a [red]desc[/]", "[red]bad[x]", "'[/x]'"):
        assert text in r.stdout, (text, r.stdout)


def test_report_escapes_message_and_hint(capsys: pytest.CaptureFixture[str]) -> None:
    cli.report(errors.InputError("x [/y] [bold]z", hint="try [red]w[/]"))
    err = capsys.readouterr().err
    assert "error: x [/y] [bold]z" in err and "hint: try [red]w[/]" in err


# --- numbers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("fs.disk_size=1e400G", "--set fs.disk_size='1e400G'"),
        ("fs.disk_size=inf", "--set fs.disk_size="),
        ("fs.disk_size=nan", "--set fs.disk_size="),
        ("fs.disk_size=99999999999999999999", "--set fs.disk_size=99999999999999999999"),
        ("fs.disk_size=1e30G", "--set fs.disk_size='1e30G'"),
        ("check.timeout=inf", "--set check.timeout=inf"),
        ("check.timeout=-inf", "--set check.timeout=-inf"),
        ("check.timeout=nan", "--set check.timeout=nan"),
        ("check.timeout=1e300", "--set check.timeout=1e+300"),
        ("seed=99999999999999999999", "--set seed=99999999999999999999"),
        ("workload.ops=1e400", "--set workload.ops=inf"),
    ],
)
def test_numbers_out_of_range_are_bad_input(item: str, said: str) -> None:
    r = scenario("show", NAME, "--set", item)
    assert_bad_input(r, f"scenarios/{NAME}.toml", said)


def test_seed_flag_too_large_is_bad_input() -> None:
    r = scenario("run", NAME, "--seed", str(2**64))
    assert_bad_input(r, f"seed={2**64}", "too large")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("seed = 99999999999999999999\n", "key 'seed' = 99999999999999999999: too large"),
        (
            '[fs]\ntype = "ext2"\ndisk_size = 99999999999999999999\n',
            "key 'fs.disk_size' = 99999999999999999999",
        ),
        ("[check]\ntimeout = inf\n", "key 'check.timeout' = inf: must be a finite number"),
        ("[check]\ntimeout = nan\n", "key 'check.timeout' = nan: must be a finite number"),
        ("[workload]\nops = -99999999999999999999\n", "key 'workload.ops' = -99999999999999999999"),
    ],
)
def test_numbers_out_of_range_in_files_are_bad_input(tmp_path: Path, body: str, said: str) -> None:
    path = tmp_path / "big.toml"
    base = 'description = "d"\n'
    fs = "" if "[fs]" in body else '[fs]\ntype = "ext2"\n'
    path.write_text(base + body + fs if body.startswith("seed") else base + fs + body)
    assert_bad_input(scenario("show", str(path)), str(path), said)


def test_piped_tables_are_whole_but_not_padded(capsys: pytest.CaptureFixture[str]) -> None:
    """A grid with one 500-character cell padded every other line to it when piped
    (issue 39: `results show | less` was ~60 lines of trailing spaces)."""
    from rich.table import Table

    from harness.report.markup import console

    t = Table.grid(padding=(0, 2))
    t.add_column()
    t.add_column()
    t.add_row("tools", "x" * 500)
    t.add_row("run", "438238a22fec")
    console().print(t)
    out = capsys.readouterr().out.splitlines()
    assert out == [f"tools  {'x' * 500}", "run    438238a22fec"]
