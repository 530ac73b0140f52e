"""One seed (issue 21 item 3): ``--seed N``, ``--set seed=N`` and a campaign element's seed
are one setting, so a run started one way resumes when rerun another way."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main as cli
from harness.cli import run as cli_run
from harness.config import scenario
from harness.config.campaign import Element
from harness.errors import InputError
from harness.experiments import lifecycle
from harness.store.db import RunKind, RunStatus, Store

NAME = "ext2-fsync"


def loaded_by_cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    """The scenario ``scenario run NAME ARGV`` hands to the lifecycle (stopped there)."""
    seen: list[Any] = []

    def execute(sc: Any, **kw: Any) -> Any:
        seen.append(sc)
        raise InputError("stopped before the run")

    monkeypatch.setattr(cli_run.lifecycle, "execute", execute)
    assert cli.main(["run", NAME, *argv]) == 2
    return seen[0]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("--seed", "7"), ("--set", "seed=7")),
        (
            ("--seed", "7", "--set", "check.timeout=99"),
            ("--set", "check.timeout=99", "--set", "seed=7"),
        ),
        (
            ("--set", "seed=3", "--seed", "7"),
            ("--set", "seed=7"),
        ),  # the flag wins, as --backend does
    ],
)
def test_seed_flag_is_the_seed_key(
    monkeypatch: pytest.MonkeyPatch, a: tuple[str, ...], b: tuple[str, ...]
) -> None:
    x, y = loaded_by_cli(monkeypatch, *a), loaded_by_cli(monkeypatch, *b)
    assert x.seed == y.seed == 7
    assert x.resolved() == y.resolved()
    assert x.resolved()["seed"] == 7


def test_a_run_resumes_whichever_way_the_seed_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "lab.sqlite"
    first = loaded_by_cli(monkeypatch, "--seed", "7")
    with Store.open(db) as st:
        run_id = st.begin_run(first.name, RunKind.CRASH, first.resolved(), first.seed)
        st.finish_run(run_id, RunStatus.INTERRUPTED, {})
    again = loaded_by_cli(monkeypatch, "--set", "seed=7")
    element = Element(0, NAME, (), 7)
    from_campaign = scenario.load(NAME, scenario.seeded(element.overrides, element.seed))
    with Store.open(db) as st:
        assert st.find_resumable_run(again.name, again.resolved(), again.seed) == run_id
        assert (
            st.find_resumable_run(from_campaign.name, from_campaign.resolved(), from_campaign.seed)
            == run_id
        )
        # and a different seed is a different run
        other = scenario.load(NAME, scenario.seeded((), 8))
        assert st.find_resumable_run(other.name, other.resolved(), other.seed) is None


def test_campaign_seed_is_in_the_parameters() -> None:
    """A campaign's second repetition used to store the file's seed in its parameters."""
    base = scenario.load(NAME)
    rep = scenario.load(NAME, scenario.seeded(("check.timeout=99",), base.seed + 1))
    assert rep.seed == rep.resolved()["seed"] == base.seed + 1
    assert rep.overrides == ("check.timeout=99",)  # how the seed came is not a parameter
    # the first repetition (the file's own seed) is the same run as a plain `scenario run`
    assert scenario.load(NAME, scenario.seeded((), base.seed)).resolved() == base.resolved()


def test_execute_takes_the_seed_from_the_scenario_only() -> None:
    assert "seed" not in inspect.signature(lifecycle.execute).parameters


def test_bad_seed_is_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", NAME, "--set", "seed=x7"]) == 2
    assert "seed" in capsys.readouterr().err
