"""The morning digest (``scenario campaign digest``, harness/report/digest.py): two nights
of one campaign written through the store's own campaign API; what changed between them
is what the digest says, and its exit status, mail and JUnit agree."""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from harness.cli import main as cli
from harness.outcome import Outcome
from harness.report import digest
from harness.store.campaigns import element_update
from harness.store.db import Store
from tests.synth import add_run

C, R, L = Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS
Night = Sequence[tuple[str, Sequence[Outcome] | str, float]]


def night(st: Store, cid: str, day: str, elements: Night) -> None:
    """A night of the campaign "camp": (scenario, outcomes of its run, or the status
    of an element that did not finish, fsck seconds)."""
    st.begin_campaign(cid, "camp", "camp.toml", "h", "{}", f"2026-01-0{day}T01:00:00", "h", 1)
    rows = [(sc, i, sc, json.dumps([]), 1) for i, (sc, _, _) in enumerate(elements)]
    st.add_campaign_elements(cid, rows)
    for sc, outcomes, fsck in elements:
        if isinstance(outcomes, str):
            why = "HarnessError: the guest did not boot"
            st.update_element(element_update(cid, sc, status=outcomes, last_error=why))
            continue
        run = add_run(st, sc, sc.split("-")[0], None, outcomes, fsck=fsck)
        st.update_element(element_update(cid, sc, status="done", run_id=run, seconds=600.0))


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        night(st, "n1n1n1n1n1n1", "1", [
            ("ext4-ordered-fsync", [C, C, C, R], 0.1),
            ("xfs-fsync", [C, C, C], 0.1),
            ("ext2-fsync", [C], 0.1),
        ])  # fmt: skip
        night(st, "n2n2n2n2n2n2", "2", [
            ("ext4-ordered-fsync", [C, R, C, L], 0.2),
            ("xfs-fsync", [C, C, C], 0.1),
            ("ext2-fsync", "quarantined", 0.1),
        ])  # fmt: skip
    return db


def test_what_changed_since_last_night(lab: Path) -> None:
    with Store.open(lab) as st:
        d = digest.build(st, "camp")
    assert (d.night, d.previous) == ("n2n2n2n2n2n2", "n1n1n1n1n1n1")
    assert [(s, b, a) for _, s, b, a in d.worse] == [
        ("fua-001", "consistent", "repaired"), ("fua-003", "repaired", "data_loss"),
    ]  # fmt: skip
    assert [(p.element, p.phase, round(p.ratio, 2)) for p in d.phases] == [
        ("ext4-ordered-fsync seed=1", "fsck", 2.0)
    ]  # xfs's fsck did not move: no line
    assert d.failures == [
        ("ext2-fsync seed=1", "quarantined", "HarnessError: the guest did not boot")
    ]
    assert d.needs_a_person and d.seconds == 1200.0
    text = digest.markdown(d)
    assert "**needs a person**" in text and "fua-003 repaired -> data_loss" in text


def test_a_kernel_update_between_nights_is_news_by_its_counts(tmp_path: Path) -> None:
    # A new kernel records the workload anew: other cuts, other state ids, so no state
    # pairs with last night's; the element's findings are compared by their counts.
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        for cid, day, kernel, outcomes, ids in (
            ("n1n1n1n1n1n1", "1", "6.1.0-55-amd64", [C, C, C], "old"),
            ("n2n2n2n2n2n2", "2", "6.1.0-56-amd64", [C, L, C], "new"),
        ):
            st.begin_campaign(cid, "camp", "camp.toml", "h", "{}", f"2026-01-0{day}T01:00", "h", 1)
            st.add_campaign_elements(
                cid, [("ext4-ordered-fsync", 0, "ext4-ordered-fsync", "[]", 1)]
            )
            run = add_run(st, "ext4-ordered-fsync", "ext4", None, outcomes, kernel=kernel, ids=ids)
            st.update_element(
                element_update(cid, "ext4-ordered-fsync", status="done", run_id=run, seconds=60.0)
            )
        d = digest.build(st, "camp")
    assert d.worse == [] and d.needs_a_person
    (element, outcome, before, after, why), *rest = d.more
    assert element.startswith("ext4-ordered-fsync")
    assert (outcome, before, after, rest) == ("data_loss", 0, 1, [])
    assert "6.1.0-55-amd64 -> 6.1.0-56-amd64" in why
    assert "data_loss 0 -> 1 states" in digest.markdown(d)


def test_the_first_night_compares_nothing(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        night(st, "n1n1n1n1n1n1", "1", [("xfs-fsync", [C, C], 0.1)])
        d = digest.build(st, "camp")
    assert d.previous is None and not d.needs_a_person
    assert "the first night" in digest.markdown(d)


def test_the_command_writes_mail_and_junit_and_exits_1_on_news(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = tmp_path / "camp.toml"
    camp.write_text('[[run]]\nscenario = "xfs-fsync"\n')
    out, called = tmp_path / "out", tmp_path / "called"
    notify = f"sh -c 'cp \"$0\" {called}'"
    argv = ["campaign", "digest", str(camp), "--db", str(lab), "--out", str(out)]
    assert cli.main([*argv, "--notify", notify]) == 1
    assert called.read_text() == (out / "digest.md").read_text()
    m = email.message_from_bytes((out / "digest.eml").read_bytes(), policy=email.policy.default)
    assert m["Subject"] == "[crashlab] camp: 0 new, 2 worse, 1 failures"
    suite = ET.parse(out / "digest.junit.xml").getroot()
    failing = sorted(tc.get("name", "") for tc in suite if tc.find("failure") is not None)
    assert failing == ["harness", "verdicts"]
    # A notification that fails is said; the digest and the exit status stand.
    capsys.readouterr()
    assert cli.main([*argv, "--notify", "false"]) == 1
    assert "notify: false exited 1" in capsys.readouterr().out
