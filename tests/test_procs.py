"""Two or more processes at once (``workload.processes``, harness/guest/procs.py): each
draws its own seeded ops in its own directory and calls them at the same time as the
others; the op list is the order the calls returned, and the oracle built from it holds
the tree they leave. Real calls on a tmp directory (threads, as in the guest); the
crash states are tests/test_procs_vm.py's."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.guest import opgen, procs
from harness.model import oracle
from harness.model.generate import Generator
from harness.model.ops import Op


def run(root: Path, n: int, seed: int = 3) -> dict[str, Any]:
    root.mkdir()
    body = opgen.execute(str(root), generator=Generator(seed, 16, 65536), count=150, processes=n)
    assert body["complete"], body["error"]
    return {"format": oracle.FORMAT, "processes": n, **body}


def by_process(o: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in o["ops"]:
        if e.get("proc") is not None:
            out[e["proc"]].append({k: v for k, v in e.items() if k not in ("i", "mark")})
    return out


def test_each_process_keeps_to_its_own_directory(tmp_path: Path) -> None:
    o = run(tmp_path / "r", 3)
    ops = by_process(o)
    assert sorted(ops) == [0, 1, 2] and sum(map(len, ops.values())) == 150
    for k, mine in ops.items():
        for e in mine:
            assert all(e[key].startswith(f"p{k}") for key in ("path", "dst") if e.get(key)), e
            assert e["op"] not in ("sync", "syncfs")  # a process's sync is its dir's fsync
    marks = [e["mark"] for e in o["ops"] if "mark" in e]
    assert len(marks) == len(set(marks)) == len(o["marks"])  # one mark a persistence op
    # The tree the processes left is what the final mark requires.
    assert oracle.verify(str(tmp_path / "r"), o, o["final_mark"]).ok


def test_a_seed_fixes_each_process_s_ops_not_their_interleaving(tmp_path: Path) -> None:
    one, two = by_process(run(tmp_path / "a", 2)), by_process(run(tmp_path / "b", 2))
    assert one == two  # each process's own sequence; the kernel orders the returns
    assert by_process(run(tmp_path / "c", 2, seed=4)) != one


def test_no_cut_is_exact_when_processes_race(tmp_path: Path) -> None:
    o = run(tmp_path / "r", 2)
    mark = o["marks"][3]["mark"]
    assert oracle.requirements(o, mark, exact=True) == oracle.requirements(o, mark, exact=False)
    alone = {**o, "processes": 1}
    assert oracle.requirements(alone, mark, exact=True) != oracle.requirements(o, mark, True)


def test_a_process_op_is_placed_in_its_directory() -> None:
    assert procs.placed(Op("write", "d1/f2", dst=""), 1).path == "p1/d1/f2"
    assert procs.placed(Op("rename", "f1", dst="d2/f1"), 0).dst == "p0/d2/f1"
    assert procs.placed(Op("fsync_dir", ""), 2) == Op("fsync_dir", "p2")
    assert procs.placed(Op("sync"), 3) == Op("fsync_dir", "p3")
    assert procs.placed(Op("fsync_fd", fd="h1"), 1).fd == "p1.h1"


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["workload.processes=9"], "at most 8"),
        (["workload.processes=3", "workload.files=2"], "3 processes share 2 files"),
        (["workload.processes=2", "fs.fill=0.9"], "one process at a time"),
        (["workload.processes=2", "workload.family=relog"], "processes draw their own"),
    ],
)
def test_bad_process_counts_are_refused(overrides: list[str], said: str) -> None:
    with pytest.raises(InputError) as e:
        scenario.load("ext4-ordered-fsync", overrides)
    assert "workload.processes" in e.value.message and said in e.value.message


def test_a_call_that_ran_across_marks_frees_its_names_from_each(tmp_path: Path) -> None:
    """Measured on ext4 6.12.118 (campaigns/setups.toml): p3's unlink, started after mark
    15, was committed by p1's fsync before mark 16 and recorded after it; the state cut
    between them lacked p3/f3, which mark 15 still required. A call's names now leave
    every mark placed while it ran (``Tracker.late``)."""
    from harness.guest.opgen import Execution, Marking
    from harness.model.oracle.marks import Tracker

    track = Tracker(fsync_names=True)
    run = Execution(str(tmp_path), track, Marking())
    for op in (Op("mkdir", "p0"), Op("mkdir", "p1"), Op("create", "p0/a"), Op("sync")):
        run.step(op)
    unlink, fsync = Op("unlink", "p0/a"), Op("fsync_dir", "p1")
    since = run.call(unlink, 0)  # p0's unlink starts after mark 1 ...
    run.returned(fsync, 1, run.call(fsync, 1))  # ... p1's fsync returns: mark 2 ...
    run.returned(unlink, 0, since)  # ... and only then does p0's unlink return
    first, second = track.marks()
    assert (first["mark"], second["mark"]) == ("crashlab:sync:1", "crashlab:sync:2")
    assert "p0/a" not in first["files"] and "p0/a" not in second["files"]
    # A call that ran within one interval frees nothing earlier.
    assert "p0" in first["dirs"] and "p1" in first["dirs"]
