"""The known-bugs catalogue (issue 37): its file, the elements it makes, the table it
reads back, and the bisection over Debian kernel packages -- without guests (the vm test
is tests/test_known_bugs_vm.py).

tests/data/changelog-linux-image-6.1.0-55-excerpt.txt: the top of
/usr/share/doc/linux-image-6.1.0-55-amd64/changelog.gz (apt-get download
linux-image-6.1.0-55-amd64, 2026-11-28), the upload's header, 34 of its entries (its
io_uring, xfs, ext4 and btrfs ones, two of them wrapped) and the previous upload's header
with its first lines.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.config import campaign as config_campaign
from harness.errors import InputError
from harness.kernel import bisect
from harness.model import opfile
from harness.outcome import Account, Outcome
from harness.report import knownbugs
from harness.store.model import ItemOutcome

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "campaigns" / "known-bugs.toml"
DATA = Path(__file__).parent / "data"


def test_every_bug_of_the_catalogue_parses_and_makes_its_elements() -> None:
    camp = config_campaign.load(CATALOGUE)
    assert len(camp.bugs) >= 8
    for bug in camp.bugs:
        ops = opfile.parse((CATALOGUE.parent / bug.workload).read_text(), bug.fs)
        assert opfile.persistence_points(ops) >= 1, bug.name
    roles = {(e.bug or ("", ""))[1] for e in camp.elements}
    assert roles == {"buggy", "fixed", "image"}
    first = [e for e in camp.elements if e.bug and e.bug[0] == "btrfs-zero-size-after-link"]
    assert [e.bug[1] for e in first if e.bug] == ["buggy", "fixed", "image"]
    assert "kernel=6.1.0-54-amd64" in first[0].overrides
    assert "expect=findings" in first[0].overrides
    assert "expect=clean" in first[1].overrides
    assert not any(o.startswith("kernel=") for o in first[2].overrides)


def test_a_bug_without_its_reason_or_with_a_bad_commit_is_named(tmp_path: Path) -> None:
    steps = tmp_path / "steps.ops"
    steps.write_text("write a 0 4K\nfsync a\n")
    body = (
        '[[bug]]\nname = "x"\nfs = "ext4"\ncommit = "{commit}"\ntitle = "t"\n'
        'scenario = "ext4-ordered-fsync"\nworkload = "steps.ops"\nbuggy = "6.1.0-54-amd64"\n'
        'fixed = "6.1.0-55-amd64"\nsymptom = "s"\nreproduces = false\n'
    )
    f = tmp_path / "c.toml"
    f.write_text(body.format(commit="5254d4181add"))
    with pytest.raises(InputError, match="needs its reason"):
        config_campaign.load(f)
    f.write_text(body.format(commit="not-a-commit").replace("reproduces = false\n", ""))
    with pytest.raises(InputError, match="commit"):
        config_campaign.load(f)


def _row(bug: tuple[str, str], run_id: str | None, status: str = "done") -> Any:
    element = SimpleNamespace(bug=bug)
    return SimpleNamespace(element=element, run_id=run_id, status=status, seconds=40.0)


def _items(findings: int, clean: int) -> list[ItemOutcome]:
    out = [ItemOutcome(f"s{i}", Outcome.DATA_LOSS, {}, "verdicts") for i in range(findings)]
    return out + [ItemOutcome(f"c{i}", Outcome.CONSISTENT, {}, "verdicts") for i in range(clean)]


def test_the_table_says_caught_clean_missed_and_found() -> None:
    bug = config_campaign.load(CATALOGUE).bugs[0]
    reads = {
        "r1": (Account(counts={"data_loss": 1}), _items(1, 6)),
        "r2": (Account(), _items(0, 7)),
        "r3": (Account(counts={"data_loss": 2}), _items(2, 5)),
    }
    rows = knownbugs.table(
        [bug], [_row((bug.name, "buggy"), "r1"), _row((bug.name, "fixed"), "r2")], reads
    )
    v = rows[0].verdicts
    assert (v["buggy"].result, v["buggy"].findings, v["buggy"].states) == ("caught", 1, 7)
    assert v["fixed"].result == "clean"
    assert not rows[0].as_expected  # the image's kernel has not run
    rows = knownbugs.table(
        [bug],
        [
            _row((bug.name, "buggy"), "r2"),
            _row((bug.name, "fixed"), "r3"),
            _row((bug.name, "image"), "r2"),
        ],
        reads,
    )
    v = rows[0].verdicts
    assert (v["buggy"].result, v["fixed"].result, v["image"].result) == ("MISSED", "FOUND", "clean")
    assert not rows[0].as_expected
    assert "not as expected: btrfs-zero-size-after-link" in knownbugs.summary_line(rows)


def test_a_bug_that_does_not_reproduce_stays_in_the_table() -> None:
    bug = (
        config_campaign.load(CATALOGUE)
        .bugs[0]
        .model_copy(update={"reproduces": False, "reason": "a race with the transaction kthread"})
    )
    rows = knownbugs.table([bug], [], {})
    assert rows[0].verdicts["buggy"].result == "not run"
    assert rows[0].as_expected
    assert "1 not reproduced here" in knownbugs.summary_line(rows)


def test_bisect_finds_the_first_package_whose_verdict_changes() -> None:
    known = [f"6.1.0-{n}-amd64" for n in range(47, 57)]
    # The fix landed in -55: a finding before, clean from there on. Good is the fixed one.
    steps = bisect.between("6.1.0-56-amd64", "6.1.0-47-amd64", known)
    assert steps[0] == "6.1.0-56-amd64" and steps[-1] == "6.1.0-47-amd64"
    booted: list[str] = []

    def verdict(release: str) -> bool:
        booted.append(release)
        return bisect.number(release) < 55

    b = bisect.bisect(steps, verdict)
    assert b.first_changed == "6.1.0-54-amd64"
    assert len(booted) <= 2 + 4  # the endpoints, then log2(10) rounded up
    with pytest.raises(InputError, match="agree"):
        bisect.bisect(steps, lambda r: True)


def test_bisect_names_what_apt_does_not_have_and_mixed_series() -> None:
    known = [f"6.1.0-{n}-amd64" for n in range(47, 57)]
    with pytest.raises(InputError, match="no such package") as e:
        bisect.between("6.1.0-5-amd64", "6.1.0-54-amd64", known)
    assert "6.1.0-54-amd64" in (e.value.hint or "") or "6.1.0-5" in (e.value.hint or "")
    with pytest.raises(InputError, match="not a Debian kernel release"):
        bisect.series("5.10.0-1-amd64")


def test_the_changelog_lines_of_the_upload_that_touch_the_fs() -> None:
    text = (DATA / "changelog-linux-image-6.1.0-55-excerpt.txt").read_text()
    section = bisect.upload_section(text, "6.1.190-1")
    assert section[0].startswith("linux-signed-amd64 (6.1.192+1)")
    assert not any(line.startswith("linux (6.1.190-1)") for line in section)
    btrfs = bisect.fs_lines(section, "btrfs")
    assert btrfs == [
        "- btrfs: log new dentries when logging parent dir of a conflicting inode (CVE-2026-23465)",
        "- btrfs: fix zero size inode with non-zero size after log replay (CVE-2026-43118)",
    ]
    assert all(line.startswith("- ext4:") for line in bisect.fs_lines(section, "ext4"))
    assert bisect.fs_lines(section, "xfs") == [
        "- xfs: fix cursor and pointer handling when recovering iunlink buckets"
    ]
