"""Soundness of the oracle on random workloads: whatever a mark requires (files, prefixes,
either, absent, nlink; loose and exact) must hold in the tree as it was at the moment the
mark was placed -- which is exactly what a crash cut at that mark keeps. A rule that
requires more than the workload did fails here for some seed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.guest import opgen
from harness.model import generate, oracle


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32),
    ops=st.integers(1, 150),
    files=st.integers(1, 8),
    extended=st.booleans(),
    bug_ops=st.booleans(),
    ordered=st.booleans(),
)
def test_every_mark_holds_in_the_tree_as_it_was_at_the_mark(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    ops: int,
    files: int,
    extended: bool,
    bug_ops: bool,
    ordered: bool,
) -> None:
    base = tmp_path_factory.mktemp("snap")
    root = base / "root"
    root.mkdir()
    snaps: dict[str, Path] = {}

    def snapshot(mark_cmd: str, dm_name: str, text: str) -> None:
        # cp -a keeps hard links within the tree (shutil.copytree does not), so the
        # nlink rule sees the link counts the workload made.
        snaps[text] = base / text.replace(":", "_")
        subprocess.run(["cp", "-a", str(root), str(snaps[text])], check=True)

    with monkeypatch.context() as mp:
        mp.setattr(opgen, "emit_mark", snapshot)
        gen = generate.Generator(seed, files, 9000, extended, bug_ops)
        body = opgen.execute(str(root), generator=gen, count=ops, ordered=ordered)
    assert body["complete"], body["error"]
    o = {"format": oracle.FORMAT, **body}
    for entry in body["marks"]:
        for exact in (False, True):
            v = oracle.verify(str(snaps[entry["mark"]]), o, entry["mark"], exact)
            assert v.ok, (seed, ops, files, extended, bug_ops, ordered, entry["mark"], exact, v)
