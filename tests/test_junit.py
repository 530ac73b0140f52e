"""JUnit XML of campaigns and runs (harness/report/junit.py): a store written as runs and
campaigns write it -- a campaign of a clean run, a run with findings (one of them
expected by ext2's rule), a run with a hang, an element its kernel cannot run, one the
lab quarantined and an optional scenario that does not exist; a search run with a
finding cluster; a faults run; a real check-log run of the recorded ext4 fixture -- then
the XML validated against the Jenkins xunit plugin's JUnit schema
(tests/data/junit/junit-10.xsd) with ``xmlschema`` and read back with ``junitparser``,
and what it says compared with what the store says."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import junitparser
import pytest
import xmlschema

from harness.campaign.runner import ElementContext, Engine
from harness.cli import campaign as cli_campaign
from harness.cli.main import main
from harness.config import campaign as config_campaign
from harness.config.campaign import Element
from harness.errors import HarnessError, InputError, NotRun
from harness.outcome import Outcome, Tallied, expected_without_journal, tally
from harness.report import junit
from harness.store.db import Store
from tests.synth import add_every_kind, add_run, host_only_check_log

SCHEMA = Path(__file__).parent / "data" / "junit" / "junit-10.xsd"
C, R, L, T = Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS, Outcome.TIMEOUT

CAMPAIGN = """\
    description = "junit"
    max_failures = 1
    [[run]]
    scenario = "ext2-fsync"
    seeds = [1, 2, 3, 4, 5]
    [[run]]
    scenario = "zfs-does-not-exist-yet"
    optional = true
"""
# seed -> its run's states (4: not run on this kernel, 5: the guest never boots)
OUTCOMES = {1: [C, C, C], 2: [C, L, L, R], 3: [C, T]}


def runner(el: Element, ctx: ElementContext) -> str:
    """A scenario run as the lifecycle leaves it: states, then the account by ext2's
    rule (no journal: ``repaired`` expected) and its exit status."""
    if el.seed == 4:
        raise NotRun("zfs.ko is not built for kernel 6.1.0-18-amd64")
    if el.seed == 5:
        raise HarnessError("guest did not boot")
    assert el.seed is not None
    with Store.open(ctx.db) as st:
        run = add_run(st, el.scenario, "ext2", None, OUTCOMES[el.seed], seed=el.seed)
        items = st.item_outcomes(run)
        ruled = (
            Tallied(i.item, i.outcome, expected_without_journal(i.outcome, False)) for i in items
        )
        st.set_account(run, tally(ruled))
    return run


def campaign_file(tmp_path: Path) -> Path:
    p = tmp_path / "junit.toml"
    p.write_text(textwrap.dedent(CAMPAIGN))
    return p


@pytest.fixture()
def stored(
    ext4_small: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, str]]:
    """The store (see the module) and its runs and campaign by name."""
    db, real = host_only_check_log(ext4_small[0], tmp_path, monkeypatch)
    report = Engine(config_campaign.load(campaign_file(tmp_path)), db, runner=runner).run()
    with Store.open(db, create=False) as st:
        ids = add_every_kind(st)
    return db, {**ids, "real": real.run_id, "campaign": report.campaign_id}


def validated(xml: bytes, tmp_path: Path) -> junitparser.JUnitXml:
    """The XML checked against the schema, then parsed by a JUnit consumer."""
    xmlschema.XMLSchema(SCHEMA).validate(xml.decode())
    out = tmp_path / "read-back.xml"
    out.write_bytes(xml)
    parsed = junitparser.JUnitXml.fromfile(str(out))
    assert isinstance(parsed, junitparser.JUnitXml)
    return parsed


def results(case: junitparser.TestCase) -> list[tuple[str, str]]:
    """(kind, message) of a case's failure, error or skip; [] when it passed."""
    return [(type(r).__name__, r.message or "") for r in case.result]


def by_name(suite: junitparser.TestSuite) -> dict[str, junitparser.TestCase]:
    return {c.name: c for c in suite}


def test_a_campaign_is_one_suite_of_its_elements(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    with Store.open(db, create=False) as st:
        suite = junit.campaign_suite(st, ids["campaign"], ["zfs-does-not-exist-yet"])
        runs = {r.seed: r.run_id for r in st.campaign_runs(ids["campaign"])}
    (parsed,) = validated(junit.to_xml([suite]), tmp_path)
    cases = by_name(parsed)
    assert list(cases) == [f"ext2-fsync seed={n}" for n in range(1, 6)] + ["zfs-does-not-exist-yet"]
    assert results(cases["ext2-fsync seed=1"]) == []
    # Two data_loss states, one finding case; the repaired state is ext2's design.
    ((kind, message),) = results(cases["ext2-fsync seed=2"])
    assert kind == "Failure" and message.startswith(f"run {runs[2]}: data_loss (host/fsck): 2")
    assert "triage: scenario triage fua-001 --db" in message
    ((kind, message),) = results(cases["ext2-fsync seed=3"])
    assert kind == "Error" and "timeout (host/fsck): the lab could not check 1 item(s)" in message
    assert results(cases["ext2-fsync seed=4"]) == [
        ("Skipped", "not run: zfs.ko is not built for kernel 6.1.0-18-amd64")
    ]
    ((kind, message),) = results(cases["ext2-fsync seed=5"])
    assert kind == "Error" and "quarantined after 1 failure(s)" in message
    assert "guest did not boot" in message
    assert results(cases["zfs-does-not-exist-yet"])[0][0] == "Skipped"
    assert (parsed.tests, parsed.failures, parsed.errors, parsed.skipped) == (6, 1, 2, 2)
    assert parsed.name == "campaign junit" and parsed.time > 0
    # Each element that was tried has its seconds; the absent scenario none.
    assert [c.time is not None for c in parsed] == [True] * 5 + [False]


def test_each_run_suite_says_what_its_account_says(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    with Store.open(db, create=False) as st:
        elements = [r.run_id for r in st.campaign_runs(ids["campaign"]) if r.run_id]
        refs = [ids["real"], ids["search"], ids["faults"], *elements]
        runs = [st.run(r) for r in refs]
        xml = junit.to_xml(junit.suites(st, refs))
    parsed = validated(xml, tmp_path)
    for run, suite in zip(runs, parsed, strict=True):
        assert suite.name == run.scenario
        failures = [c for c in suite if results(c) and results(c)[0][0] == "Failure"]
        errors = [c for c in suite if results(c) and results(c)[0][0] == "Error"]
        # A finding is a failure exactly when the run's stored status says so.
        assert bool(failures) == (run.exit == 1)
        assert bool(errors) == bool(run.account.harness)
        assert (suite.failures, suite.errors) == (len(failures), len(errors))
        # The finding cases together list every finding of the account, each once; the
        # error cases every item the lab could not check.
        for cases, n in ((failures, run.account.findings), (errors, run.account.harness)):
            listed = [
                line.strip()
                for c in cases
                for line in c.result[0].text.splitlines()
                if line.startswith("  ")
            ]
            assert len(listed) == len(set(listed)) == n
        assert by_name(suite)[run.scenario].result == []  # the rest of the run passes
    real, search, faults, _clean, lossy, hung = parsed
    assert [s.errors for s in parsed] == [0, 0, 0, 0, 0, 1]
    assert by_name(hung)["timeout (host/fsck)"].result[0].type == "timeout"
    # ext2's repaired state is its design: in the passing case, not a failure.
    assert by_name(lossy)["ext2-fsync"].system_out == "1 consistent, 1 repaired (expected)"
    assert (real.tests, real.failures, real.errors) == (1, 0, 0)  # a clean run: one case
    cluster = "fs=ext4 outcome=data_loss rule=file-missing role=target op_class=creat"
    ((kind, message),) = results(by_name(search)[cluster])
    assert kind == "Failure" and "state seq1-000000/m1" in message
    assert "triage: scenario triage seq1-000000/m1 --db " + str(db) in message
    assert (
        "smallest workload: seq1-000000: creat(A) fsync(A)"
        in by_name(search)[cluster].result[0].text
    )
    # A fault item is no crash state: nothing to triage, the run's page instead.
    ((kind, message),) = results(by_name(faults)["data_loss"])
    assert "eio-1" in message and f"scenario results show {ids['faults']}" in message


def test_export_and_campaign_run_write_it_and_bad_input_exits_2(
    stored: tuple[Path, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, ids = stored
    out = tmp_path / "export.xml"
    assert (
        main(["results", "export", ids["real"], "junit", "--db", str(db), "--junit", str(out)]) == 0
    )
    parsed = validated(out.read_bytes(), tmp_path)
    with Store.open(db, create=False) as st:
        real = st.run(ids["real"]).scenario
    assert [s.name for s in parsed] == [real, "campaign junit"]
    capsys.readouterr()
    assert main(["results", "export", ids["search"], "--db", str(db), "--junit", "-"]) == 0
    stdout = capsys.readouterr().out
    assert validated(stdout.encode(), tmp_path).failures == 1

    missing = tmp_path / "no" / "such" / "dir" / "x.xml"
    for argv, words in (
        (["results", "export", ids["real"], "--junit", str(missing)], str(missing.parent)),
        (["results", "export", "feedbeef0000", "--junit", "-"], "no run 'feedbeef0000'"),
        (["results", "export", ids["real"], "--junit", "-", "--format", "json"], "--format"),
    ):
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err
    assert not missing.parent.exists()

    # The campaign run, its elements run by the same stand-in: the XML after it.
    monkeypatch.setattr(cli_campaign, "_run_element", runner)
    written = tmp_path / "campaign.xml"
    argv = ["campaign", "run", str(campaign_file(tmp_path)), "--db", str(db), "--new"]
    assert main([*argv, "--junit", str(missing)]) == 2  # refused before any element ran
    assert main([*argv, "--junit", str(written)]) == 1
    (suite,) = validated(written.read_bytes(), tmp_path)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (6, 1, 2, 2)
    capsys.readouterr()
    assert main([*argv, "--junit", "-"]) == 1  # stdout the XML's alone, the summary on stderr
    both = capsys.readouterr()
    (suite,) = validated(both.out.encode(), tmp_path)
    assert suite.tests == 6 and "campaign junit" in both.err


def test_a_control_that_expects_findings_passes_with_them(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        caught = add_run(st, "ext4-ordered-fsync", "ext4", "ordered", [C, L])
        missed = add_run(st, "ext4-ordered-fsync", "ext4", "ordered", [C, C], seed=2)
        for run in (caught, missed):
            items = (Tallied(i.item, i.outcome) for i in st.item_outcomes(run))
            st.set_account(run, tally(items, "findings"))
        xml = junit.to_xml(junit.suites(st, [caught, missed]))
    good, bad = validated(xml, tmp_path)
    assert (good.tests, good.failures) == (2, 0)
    assert "known-answer control's finding" in by_name(good)["data_loss (host/fsck)"].system_out
    assert [results(c) for c in bad] == [
        [("Failure", "control failed: expected findings, got none")],
        [],
    ]


def test_a_name_that_is_no_run_or_campaign_is_input_error(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        add_every_kind(st)
        with pytest.raises(InputError, match="no run 'nightlyx'"):
            junit.suites(st, ["nightlyx"])
        assert junit.resolve(st, "nightly") == ("campaign", "night1")  # the newest by name
        assert junit.resolve(st, "night0") == ("campaign", "night0")
    with pytest.raises(InputError, match="is a directory"):
        junit.destination(str(tmp_path))


def test_characters_xml_cannot_hold_are_dropped(tmp_path: Path) -> None:
    case = junit.Case("c", "n\x00ame", junit.Result.FAILURE, "bad \x1b[31m", "data_loss", "x\x07")
    xml = junit.to_xml([junit.Suite("s", "1", [case], seconds=1.5)])
    (suite,) = validated(xml, tmp_path)
    assert [c.name for c in suite] == ["name"] and results(next(iter(suite))) == [
        ("Failure", "bad [31m")
    ]


def test_an_interrupted_campaign_skips_the_elements_it_never_reached(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"

    def stopped_at_seed_2(el: Element, ctx: ElementContext) -> str:
        if el.seed == 2:
            raise KeyboardInterrupt
        return runner(el, ctx)

    camp = config_campaign.load(campaign_file(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        Engine(camp, db, runner=stopped_at_seed_2).run()
    with Store.open(db, create=False) as st:
        cid = st.latest_campaign("junit")
        assert cid is not None
        (suite,) = validated(junit.to_xml(junit.suites(st, ["junit"])), tmp_path)
    assert {p.name: p.value for p in suite.properties()}["campaign"] == cid[0]
    assert (suite.tests, suite.failures, suite.skipped) == (5, 0, 4)
    assert [results(c) for c in suite][1] == [
        ("Skipped", "not run: the campaign stopped before it (element pending)")
    ]
