"""Two processes at once in a real guest (issue 47): ext4's op generator drawn by two
threads, each in its own directory, their fsyncs racing each other's writes and renames
in one journal. The op list records which process made each call and in what order they
returned; every mark state is judged; the stock kernel keeps every promise (a negative
control)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.scenariorun import only_oracle, said, scenario_run

pytestmark = pytest.mark.vm


def test_two_processes_race_and_the_stock_kernel_keeps_its_promises(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    r = scenario_run(
        db, "ext4-ordered-fsync",
        "--set", "workload.processes=2", "--set", "workload.ops=80",
        "--set", "crash.states=[{kind='mark'}]", "--set", "crash.max_states=12",
    )  # fmt: skip
    assert r.returncode == 0, said(r)
    with sqlite3.connect(db) as con:
        outcomes = Counter(o for (o,) in con.execute("SELECT outcome FROM checks"))
    oracle = only_oracle(db)
    calls = Counter(e.get("proc") for e in oracle["ops"] if e.get("proc") is not None)
    assert calls == {0: 40, 1: 40} and oracle["processes"] == 2
    # The two interleaved: neither ran all its calls before the other began.
    order = [e["proc"] for e in oracle["ops"] if e.get("proc") is not None]
    assert order != sorted(order)
    assert set(outcomes) == {"consistent"} and sum(outcomes.values()) >= 10
