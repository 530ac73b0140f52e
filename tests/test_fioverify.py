"""The fio block oracle (rule 12): the sectioned job the recorder runs, and the judge of
a crash state's fio file, on blocks fio 3.33 really wrote (tests/data/fio/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.config import fiojob as rules
from harness.config import scenario
from harness.errors import HarnessError, InputError
from harness.model import contract, fioverify
from harness.model import oracle as guest_oracle
from harness.model.oracle.doc import OracleDoc
from harness.record import fiojob

DATA = Path(__file__).parent / "data" / "fio"
BS = 4096
SOURCE = """
[global]
ioengine=psync
bs=4k
size=64k
rw=randwrite
fsync=2
randseed=1
direct=0

[randwrite-fsync]
filename=fio.data
"""
# What wrote tests/data/fio/marks.txt instead of dmsetup on the host.
MARK_ARGV = ["sh", "-c", 'echo "$0" >> /tmp/fio-oracle-t/marks.txt']


def oracle(fsync_names: bool = True) -> dict[str, object]:
    return fiojob.oracle(rules.parse(SOURCE, 4), marked=True, fsync_names=fsync_names)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copy(DATA / "fio.data", tmp_path / "fio.data")
    return tmp_path


def damage(root: Path, block: int, data: bytes) -> None:
    with open(root / "fio.data", "r+b") as f:
        f.seek(block * BS)
        f.write(data)


def test_the_fixture_was_written_by_the_rendered_job() -> None:
    job = fiojob.render(rules.parse(SOURCE, 4), MARK_ARGV)
    assert job == (DATA / "job.fio").read_text()
    assert "exec_postrun" not in fiojob.render(rules.parse(SOURCE, 4), None)


def test_every_block_fio_wrote_is_its_own_and_nowhere_else() -> None:
    raw = (DATA / "fio.data").read_bytes()
    blocks = [raw[i : i + BS] for i in range(0, len(raw), BS)]
    assert len(blocks) == 16
    assert [fioverify.classify(b, i * BS, BS) for i, b in enumerate(blocks)] == ["valid"] * 16
    # Block 1 read at block 0's offset: a valid fio block, but not this offset's.
    assert fioverify.classify(blocks[1], 0, BS) == "other"
    assert fioverify.classify(bytes(BS), 0, BS) == "zero"
    assert fioverify.classify(blocks[0][:100], 0, BS) == "eof"
    flipped = bytearray(blocks[0])
    flipped[BS - 1] ^= 1
    assert fioverify.classify(bytes(flipped), 0, BS) == "other"
    torn = blocks[0][:512] + bytes(BS - 512)  # the first sector new, the rest old
    assert fioverify.classify(torn, 0, BS) == "other"


def test_marks_require_the_sections_before_them() -> None:
    o = oracle()
    assert [fioverify.requirements(o, f"crashlab:sync:{k}") for k in range(1, 6)] == [1, 2, 3, 4, 4]
    assert fioverify.requirements(o, "crashlab:umount") == 4
    assert fioverify.requirements(o, "crashlab:mkfs") is None
    assert fioverify.requirements(o, None) is None


def test_the_whole_file_passes_at_every_mark(root: Path) -> None:
    for mark in ("crashlab:mkfs", "crashlab:sync:2", "crashlab:sync:5", "crashlab:umount"):
        r = fioverify.verify(str(root), oracle(), mark)
        assert r.ok, (mark, r)
    assert fioverify.verify(str(root), oracle(), "crashlab:sync:5").checked == 16


def test_a_required_block_lost_is_data_loss_a_free_one_a_count(root: Path) -> None:
    damage(root, 5, bytes(BS))  # section 2's second block: back to the layout's zeros
    damage(root, 13, b"\xff" * 512)  # section 4: torn, neither old nor fio's
    at1 = fioverify.verify(str(root), oracle(), "crashlab:sync:1")
    assert at1.ok
    assert at1.blocks["free"] == {"valid": 10, "zero": 1, "eof": 0, "other": 1}
    at2 = fioverify.verify(str(root), oracle(), "crashlab:sync:2", exact=True)
    assert not at2.ok
    assert at2.mismatched == [contract.Mismatch(path="fio.data", offset=5 * BS, holds="zero")]
    assert at2.blocks is not None and at2.blocks["required"] == {
        "valid": 7,
        "zero": 1,
        "eof": 0,
        "other": 0,
    }
    final = fioverify.verify(str(root), oracle(), "crashlab:umount")
    assert [m.holds for m in final.mismatched] == ["zero", "other"]
    assert final.lost_blocks == 2


def test_a_short_file_loses_the_blocks_past_its_end(root: Path) -> None:
    with open(root / "fio.data", "r+b") as f:
        f.truncate(6 * BS)
    r = fioverify.verify(str(root), oracle(), "crashlab:sync:2")
    assert [m.offset for m in r.mismatched] == [6 * BS, 7 * BS]
    assert {m.holds for m in r.mismatched} == {"eof"}


def test_a_missing_file_is_lost_only_where_fsync_keeps_names(tmp_path: Path) -> None:
    journaled = fioverify.verify(str(tmp_path), oracle(True), "crashlab:sync:1")
    assert not journaled.ok and journaled.missing == ["fio.data"]
    ext2 = fioverify.verify(str(tmp_path), oracle(False), "crashlab:sync:1")
    assert ext2.ok and ext2.lost_blocks == 0
    # Before the first mark nothing is required, names or blocks.
    assert fioverify.verify(str(tmp_path), oracle(True), "crashlab:mkfs").ok


@pytest.mark.parametrize(
    "change, words",
    [
        ("numjobs=2", "numjobs"),
        ("norandommap", "norandommap"),
        ("rw=randrw", "rw=randrw"),
        ("size=60k", "whole 4096-byte blocks"),
        ("filename=a:b", "one plain file name"),
        ("size=50%", "not an absolute size"),
    ],
)
def test_jobs_the_oracle_cannot_judge_are_refused(change: str, words: str) -> None:
    key = change.split("=")[0]
    job = "\n".join(line for line in SOURCE.splitlines() if not line.startswith(key + "="))
    with pytest.raises(rules.JobError, match=words):
        rules.parse(job + "\n" + change + "\n", 4)


def test_two_job_sections_are_refused() -> None:
    with pytest.raises(rules.JobError, match="exactly one job section"):
        rules.parse(SOURCE + "\n[second]\nrw=write\n", 4)


def test_the_scenario_names_the_key_and_the_way_out() -> None:
    with pytest.raises(InputError) as e:
        scenario.load("ext4-fio", ["workload.sections=3"])  # 16m is not 3 sections of 4k
    assert "workload.job" in e.value.message and "sections = 0" in (e.value.hint or "")
    w = scenario.load("ext4-fio", ["workload.sections=0"]).workload  # type: ignore[attr-defined]
    assert w.sections == 0


def test_a_missing_section_mark_fails_the_recording() -> None:
    o = oracle()
    fiojob.check_marks(["crashlab:mkfs", *(f"crashlab:sync:{k}" for k in range(1, 6))], o)
    with pytest.raises(HarnessError, match="crashlab:sync:3"):
        fiojob.check_marks(["crashlab:sync:1", "crashlab:sync:2", "crashlab:sync:4"], o)


def test_triage_says_which_blocks_rule_12_required() -> None:
    from harness.triage import tree

    [line] = tree.table(oracle(), "crashlab:sync:2", True, '{"mismatched": [...]}')
    assert "first 8 blocks of `fio.data`" in line and "mismatched" in line


def test_the_host_judges_a_lost_block_data_loss_and_keeps_the_counts(root: Path) -> None:
    from harness.check import guest as guestcheck
    from harness.check.host import CheckResult
    from harness.outcome import Outcome
    from tests.guestfacts import facts

    damage(root, 2, bytes(BS))

    def judged(mark: str) -> CheckResult:
        verify = fioverify.verify(str(root), oracle(), mark)
        r = guestcheck.judge(facts(verify=verify))
        assert r.output.splitlines()[-1].startswith("fio blocks: ")  # found or not
        return r

    lost = judged("crashlab:sync:1")
    assert lost.outcome is Outcome.DATA_LOSS
    assert '"offset": 8192, "holds": "zero"' in lost.note
    assert judged("crashlab:mkfs").outcome is Outcome.CONSISTENT


def test_the_fio_oracle_is_in_the_format_checkstate_loads() -> None:
    assert fiojob.FORMAT == guest_oracle.FORMAT


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed on this host")
def test_triage_workload_script_runs_the_sectioned_job_the_oracle_judges(tmp_path: Path) -> None:
    """The report's workload.sh, run by hand: fio writes every block of every section the
    oracle requires at the final mark (the marks fail without dm-log-writes, which fio
    ignores), so the script reproduces the job the states were judged by."""
    from harness.proc import run
    from harness.triage import workload

    params = {"workload": {"type": "fio", "job": SOURCE, "sections": 4}}
    script = workload.script(params, OracleDoc.of({}), 7)
    assert script is not None and "--randseed=7" in script
    (tmp_path / "workload.sh").write_text(script)
    run(["sh", "workload.sh", f"--directory={tmp_path}"], cwd=tmp_path)
    said = fioverify.verify(str(tmp_path), oracle(), "crashlab:sync:5")
    assert said.ok and said.checked == 16
    assert said.blocks["required"]["valid"] == 16
    plain = workload.script({"workload": {"type": "fio", "job": SOURCE}}, OracleDoc(), 7)
    assert plain is not None and "exec_postrun" not in plain and "[randwrite-fsync]" in plain
