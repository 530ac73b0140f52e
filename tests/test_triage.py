"""``scenario triage`` on the host: the recorded fixture log (tests/data/logs/README.md)
checked by a host-only check-log run. Its one finding is real (a torn superblock write
that e2fsck cannot repair); a reorder state is made a finding by a stand-in checker
that fails exactly when one chosen write is lost, so ddmin's answer is known."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import tools
from harness.check.host import CheckResult
from harness.cli import checklog
from harness.cli.main import build_parser, main
from harness.crashstate import checking as states
from harness.crashstate import workloads as search_record
from harness.crashstate.onelog import commit_state
from harness.experiments import lifecycle
from harness.model.oracle.doc import OpEntry, OracleDoc
from harness.outcome import Outcome
from harness.record.logwrites import open_log
from harness.replay import replayer as replay
from harness.replay.crashstates import CrashState
from harness.store.db import RunEnv, Store
from harness.triage import absent, judge, minimal, opmin, symptom, target, workload, workmin
from tests.synth import host_only_check_log, minimised_twice

ORACLE = Path(__file__).parent / "data" / "logs" / "ext4-ops-small.oracle.json"


@pytest.fixture()
def run(
    ext4_small: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str, dict[str, str]]:
    """A host-only check-log run of the fixture's reorder and torn states: the store, the
    run id, and each state's verdict by id."""
    # The fixture's oracle is of format 1, which the guest's verifier no longer reads;
    # this run checks on the host only, and the report reads what both formats share.
    oracle = tmp_path / "oracle.json"
    oracle.write_text(ORACLE.read_text().replace("crashlab-oracle/1", "crashlab-oracle/2"))
    extra = ["--states", "reorder,torn", "--max-states", "200", "--oracle", str(oracle)]
    db, r = host_only_check_log(ext4_small[0], tmp_path, monkeypatch, extra)
    with Store.open(db, create=False) as st:
        verdicts = {s.id: str(s.outcome) for s in st.run_detail(r.run_id).states}
    return db, r.run_id, verdicts


def test_the_torn_finding_gets_a_report_folder(
    run: tuple[Path, str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, verdicts = run
    [sid] = [s for s, v in verdicts.items() if v == "unrepairable"]
    assert main(["triage", sid, "--no-workload", "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert "differing writes: 1 -> 1 (tears; 1 sectors of entry 180 kept)" in said
    assert "block 1: superblock of group 0" in said
    out = Path(said.rsplit("report: ", 1)[1].strip()).parent
    assert out == lifecycle.run_dir(run_id) / "triage" / sid
    readme = (out / "README.md").read_text()
    for want in (
        "| outcome | unrepairable |",
        "| filesystem | ext4 on a 33554432-byte device |",
        "| mkfs | `mkfs.ext4 -F -q $DEV` |",
        "| mount | `mount -t ext4 -o data=ordered $DEV $MNT` |",
        "| its base | the prefix before torn entry 180: consistent |",
        "The workload is not minimised",
    ):
        assert want in readme
    replay_sh = (out / "replay.sh").read_text()
    # Entries 0..179 whole, then the one kept sector of entry 180 from the log's bytes.
    assert 'replay-log --log "$LOG" --replay "$DEV" --limit 180\n' in replay_sh
    assert "seek=2 count=1 conv=notrunc" in replay_sh
    with open_log(out / "slice.log") as sl, open_log(lifecycle.run_dir(run_id) / "log.raw") as lg:
        assert len(sl.entries) == 1 and bytes(sl.data(sl.entries[0])) == bytes(
            lg.data(lg.entries[180])
        )
    assert (out / "slice.txt").read_text().splitlines()[1].startswith("180\t2+2\tFUA|META\t")
    assert "superblock of group 0" in (out / "explained.txt").read_text()
    tree = (out / "tree.md").read_text()
    assert "| `f3` | " in tree and "| name | expected | found |" in tree
    summary = json.loads((out / "triage.json").read_text())
    assert summary["differing"] == {"kind": "tears", "before": 1, "after": 1}
    assert summary["candidates"]["guest"] == 0  # a host-only run stays on the host
    # The workload, rendered from the oracle's op list: every op, each sync's mark.
    script = (out / "workload.sh").read_text()
    ops = json.loads(ORACLE.read_text())["ops"]
    assert script.count("# mark crashlab:sync:") == 7
    assert 'touch "$M"/f1' in script and "--seed 1 --ops 30" in script
    assert len([ln for ln in script.splitlines()[9:] if not ln.startswith("# mark")]) == len(ops)
    # results show links the folder.
    assert main(["results", "show", run_id, "--db", str(db)]) == 0
    assert f"triage of {sid}: {out / 'README.md'}" in capsys.readouterr().out


def test_a_check_log_runs_workload_is_not_minimised_and_the_report_says_why(
    run: tuple[Path, str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _, verdicts = run
    [sid] = [s for s, v in verdicts.items() if v == "unrepairable"]
    assert main(["triage", sid, "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert "workload not minimised: a check-log run: its log was recorded elsewhere" in said
    readme = Path(said.rsplit("report: ", 1)[1].strip()).read_text()
    assert "The workload is not minimised: a check-log run" in readme
    out = Path(said.rsplit("report: ", 1)[1].strip()).parent
    summary = json.loads((out / "triage.json").read_text())
    assert summary["workload"]["minimised"] is False and not (out / "minimal-workload.sh").exists()


def test_a_recorded_candidate_is_judged_by_its_states_at_the_oracle_point(
    run: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    """A candidate's recording as the recorder keeps it (here the fixture's own log and
    oracle, so no guest): its states of the failing state's kind (torn) at the oracle
    point are cut and host-checked, and it fails the same way -- one of them is as
    unrepairable as the failing state; one whose recording failed is the lab's."""
    db, _, verdicts = run
    [sid] = [s for s, v in verdicts.items() if v == "unrepairable"]
    t = target.load(sid, db)
    ops = t.oracle.workload_ops()
    p = opmin.Plan({}, ops, None, str(t.state.mark))  # judged at the final sync's mark
    work = tmp_path / "work"
    for wid, status in (("wgood", "recorded"), ("wlost", "failed")):
        d = search_record.folder(work, wid)
        d.mkdir(parents=True)
        if status == "recorded":
            shutil.copy(t.log_path, d / "log.raw")
            (d / "oracle.json").write_text(json.dumps(dict(t.oracle.raw)))
        (d / "recording.json").write_text(json.dumps({"status": status, "device_size": t.size}))
    said: list[str] = []
    lost = symptom.Symptom(Outcome.UNREPAIRABLE)
    rr = workmin.Rerecorder(t, p, lost, work, said.append, lambda s: s)
    assert rr.judge([{"id": "wgood"}, {"id": "wlost"}]) == ["fails", "harness"]
    assert rr.failing["wgood"].outcome is Outcome.UNREPAIRABLE
    assert said == ["workload ddmin round 0: checking 4 states of 1 candidates"]


def test_the_minimal_workload_renders_only_its_ops_and_renumbers_the_marks() -> None:
    oracle = json.loads(ORACLE.read_text())
    ops = oracle["ops"]
    syncs = [o["i"] for o in ops if o.get("mark") and not o.get("final")]
    keep = [0, syncs[2]]  # the first op and the third persistence op
    script = workload.script({"workload": {"type": "ops"}}, OracleDoc.of(oracle), 1, keep=keep)
    assert script is not None
    body = [ln for ln in script.splitlines() if ln and not ln.startswith(("#", "set", "M="))]
    entries = OracleDoc.of(oracle).ops
    assert body == [workload.render(entries[0]), workload.render(entries[syncs[2]]), "sync"]
    assert script.count("# mark crashlab:sync:") == 2 and "# mark crashlab:sync:2" in script
    assert f"ops 0,{syncs[2]} of the" in script


def test_ddmin_finds_the_one_lost_write_that_matters(
    run: tuple[Path, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, verdicts = run
    with Store.open(db, create=False) as st:
        raw = [st.crash_state(sid) for sid in verdicts]
    reorder = [CrashState.from_dict(json.loads(found[1])) for found in raw if found]
    state = max((s for s in reorder if s.generator == "reorder"), key=lambda s: len(s.dropped))
    assert len(state.dropped) >= 4
    first, again, culprit = minimised_twice(db, run_id, state, monkeypatch)
    assert first.state == again.state and first.state.dropped == (culprit,)
    assert first.delta.kind == "drops" and first.base.outcome is Outcome.CONSISTENT
    assert first.candidates == again.candidates and not first.search.capped
    # Each candidate is checked once, or takes the symptom of its image judged before.
    assert first.tally.host + first.tally.same_image == first.candidates
    # The budget stops it, and says so.
    short = minimal.triage(state.id, db, max_candidates=2)
    assert short.search.capped and short.search.tried == 2


def test_a_state_that_is_not_a_finding_says_its_verdict(
    run: tuple[Path, str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, verdicts = run
    sid = next(s for s, v in verdicts.items() if v == "consistent")
    assert main(["triage", sid, "--db", str(db)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert f"crash state {sid} of run {run_id} is not a finding: its verdict is consistent" in err
    assert "Traceback" not in err
    assert main(["triage", "feedfacefeedface", "--db", str(db)]) == 2
    assert "no crash state with id 'feedfacefeedface'" in " ".join(capsys.readouterr().err.split())


def test_where_missing_data_first_reaches_the_log(ext4_small: tuple[Path, dict[str, Any]]) -> None:
    if not tools.available("debugfs"):
        pytest.skip("debugfs not installed (e2fsprogs)")
    with open_log(ext4_small[0]) as lg:
        found = absent.first_writes(lg, "ext4", 32 << 20, 87, ["f3", "d5/f8", "nope"])
        # test_explain.py names entry 152 "file data of /f3", 151 of /f7 = /d5/f8.
        assert found == {"f3": (152, "crashlab:sync:6"), "d5/f8": (151, "crashlab:sync:6")}
        assert absent.first_writes(lg, "ext4", 32 << 20, 153, ["f3"]) == {}
        assert absent.first_writes(lg, "xfs", 32 << 20, 87, ["f3"]) == {}


def test_guest_rounds_are_batched_and_compared_by_oracle_finding(
    ext4_small: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guest path with a stand-in guest that finds f3 missing when one chosen write
    is lost (none, while the run checks): every round is one check_batch call of at
    most guest_batch images, each candidate compared by its oracle finding."""
    if not tools.available("e2fsck"):
        pytest.skip("e2fsck not installed (e2fsprogs)")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img, **_: RunEnv(image_hash=img.hash))
    culprit: list[tuple[int, bytes]] = []  # (offset, bytes) of the write that matters
    calls: list[int] = []

    def finding(image: Path, mark: str | None) -> CheckResult:
        with open(image, "rb") as f:
            ok = all(f.seek(off) >= 0 and f.read(len(data)) == data for off, data in culprit)
        note = "" if ok else json.dumps({"mark": mark, "missing": ["f3"]})
        outcome = Outcome.CONSISTENT if ok else Outcome.DATA_LOSS
        return CheckResult("guest", "mount+verify", outcome, 0, 0.0, note, note=note)

    def check_batch(
        items: Any, fs: Any, oracles: Any, *, timeout: float, cpus: int = 2, modes: Any = ()
    ) -> Any:
        calls.append(len(items))
        for it in items:
            yield it.key, [finding(it.image, it.mark)]  # one check: rw, no other mode

    monkeypatch.setattr(judge.guestcheck, "check_batch", check_batch)
    argv = ["check-log", str(ext4_small[0]), "--fs", "ext4", "--device-size", "32M"]
    argv += ["--states", "reorder", "--max-states", "200", "--set", "check.guest_batch=3"]
    db = tmp_path / "lab.sqlite"
    run_id = lifecycle.execute(checklog.build(build_parser().parse_args(argv)), db=db).run_id
    with Store.open(db, create=False) as st:
        found = [st.crash_state(s.id) for s in st.run_detail(run_id).states]
    state = max(
        (CrashState.from_dict(json.loads(f[1])) for f in found if f), key=lambda s: len(s.dropped)
    )
    assert len(state.dropped) >= 3
    entry = state.dropped[len(state.dropped) // 2]
    with open_log(ext4_small[0]) as lg:
        culprit.append((lg.entries[entry].offset, bytes(lg.data(lg.entries[entry]))))
        image = replay.materialize(lg, state, tmp_path / "state.img", 32 << 20)
    with Store.open(db, create=False) as st:
        commit_state(st, run_id, states.Checked(state, [finding(image, state.mark)]))
    calls.clear()
    r = minimal.triage(state.id, db)
    assert r.entries == [entry] and r.found.findings == r.original.findings
    assert r.original.findings == {("rule 1: a durable name is missing", "f3")}
    assert max(calls) <= 3 and len(calls) == r.tally.guest_boots
    assert sum(calls) == r.tally.guest <= r.tally.host


def test_every_op_of_the_file_format_has_a_shell_form_but_the_tmpfile_ones() -> None:
    """A report's steps are shell lines a maintainer can paste; an op without one is a
    comment saying why. One translation (the op table's templates) serves the report's
    script and fstests' generator alike, so only an O_TMPFILE descriptor, which no shell
    command holds, and FS_IOC_SHUTDOWN's default flag (xfs_io and godown send only the
    log flags) lack one."""
    from harness.fstests import gen
    from harness.model import opfile
    from harness.model.ops import Op

    op = {"path": "a", "dst": "b", "target": "t", "perm": "0o700", "uid": 1, "gid": 2, "fd": "h"}

    def render(kind: str) -> str:
        return workload.render(OpEntry.from_dict({"op": kind, **op}))

    bare = {k for k in opfile.SPEC if render(k).startswith("#")}
    assert bare == {"tmpfile", "linkat", "shutdown"}
    assert "O_TMPFILE" in render("tmpfile")
    assert render("exchange") == 'src/renameat2 -x "$M"/a "$M"/b'
    fstests = gen.spell(Op("exchange", "a", dst="b"))
    assert fstests == "$here/src/renameat2 -x $SCRATCH_MNT/a $SCRATCH_MNT/b"
    assert render("fsync_fd") == 'xfs_io -r -c "fsync" /proc/self/fd/${fd_h}'
