"""``results diff CAMPAIGN_A CAMPAIGN_B``: two campaigns written through the store's own
campaign API, their runs paired by element and diffed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.config.campaign import Element
from harness.errors import InputError
from harness.outcome import Outcome
from harness.report import campaign_diff
from harness.store.campaigns import element_update
from harness.store.db import Store
from tests.synth import add_run, run_results_cli

C, R, L = Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS
OLD, NEW = "6.1.0-56-amd64", "6.12.95+deb12-amd64"


def campaign(
    st: Store, cid: str, elements: Sequence[tuple[str, str, Sequence[Outcome] | None, float]]
) -> None:
    """A finished campaign of (scenario, kernel, outcomes of its run or None: failed,
    fsck seconds) elements, as the engine records one."""
    els = [Element(i, sc, (f"kernel={k}",), 1) for i, (sc, k, _, _) in enumerate(elements)]
    st.begin_campaign(cid, f"camp-{cid}", "c.toml", "h" + cid, "{}", "2026-01-01", "host", 1)
    st.add_campaign_elements(
        cid, [(e.key, e.position, e.scenario, json.dumps(list(e.overrides)), e.seed) for e in els]
    )
    for el, (sc, kernel, outcomes, fsck) in zip(els, elements, strict=True):
        if outcomes is None:
            st.update_element(element_update(cid, el.key, status="failed"))
            continue
        fs = sc.split("-")[0]
        run = add_run(st, sc, fs, None, outcomes, kernel=kernel, fsck=fsck)
        st.update_element(element_update(cid, el.key, status="done", run_id=run))


@pytest.fixture
def two_kernels(tmp_path: Path) -> Path:
    """Campaign a0 on the old kernel, b0 on the new: ext4 loses a state and its fsck
    takes twice as long, xfs is unchanged, each campaign has one element the other lacks
    a run of."""
    path = tmp_path / "lab.sqlite"
    with Store.open(path) as st:
        campaign(
            st,
            "a0a0a0a0a0a0",
            [
                ("ext4-ordered-fsync", OLD, [C, C, C, R], 0.1),
                ("xfs-fsync", OLD, [C, C, C], 0.1),
                ("ext2-fsync", OLD, None, 0.1),
            ],
        )
        campaign(
            st,
            "b0b0b0b0b0b0",
            [
                ("ext4-ordered-fsync", NEW, [C, R, C, L], 0.2),
                ("xfs-fsync", NEW, [C, C, C], 0.1),
                ("btrfs-fsync", NEW, [C], 0.1),
            ],
        )
    return path


def test_campaigns_on_two_kernels_pair_by_element_without_the_kernel(two_kernels: Path) -> None:
    with Store.open(two_kernels) as st:
        assert campaign_diff.campaign_ids(st, "a0a0", "b0b0") == ("a0a0a0a0a0a0", "b0b0b0b0b0b0")
        d = campaign_diff.diff_campaigns(st, "a0a0a0a0a0a0", "b0b0b0b0b0b0")
    cells = {p.cell: p.diff for p in d.pairs}
    assert sorted(cells) == ["ext4-ordered-fsync seed=1", "xfs-fsync seed=1"]
    ext4 = cells["ext4-ordered-fsync seed=1"]
    assert (ext4.a.guest_kernel, ext4.b.guest_kernel) == (OLD, NEW)
    assert [(c.state_id, c.before, c.after) for c in ext4.changes] == [
        ("fua-001", "consistent", "repaired"),
        ("fua-003", "repaired", "data_loss"),
    ]
    counts = {o: n for o, n in ext4.outcomes.items() if n[0] != n[1]}
    assert counts["data_loss"][1] == counts["data_loss"][0] + 1
    fsck = next(p for p in ext4.phases if p.phase == "fsck")
    assert fsck.ratio == pytest.approx(2.0)
    xfs = cells["xfs-fsync seed=1"]
    assert xfs.changes == [] and all(a == b for a, b in xfs.outcomes.values())
    assert [(u.element, u.status, u.run_id) for u in d.only_a] == [
        (f"ext2-fsync kernel={OLD} seed=1", "failed", None)
    ]
    assert [u.element for u in d.only_b] == [f"btrfs-fsync kernel={NEW} seed=1"]


def test_the_same_element_pairs_before_the_kernel_is_left_out(tmp_path: Path) -> None:
    """Two runs of one kernel matrix pair kernel with kernel; a side with several runs
    of a kernel-free key is not guessed at."""
    with Store.open(tmp_path / "lab.sqlite") as st:
        matrix = [("ext4-ordered-fsync", k, [C, C], 0.1) for k in (OLD, NEW)]
        campaign(st, "a1a1a1a1a1a1", matrix)
        campaign(st, "b1b1b1b1b1b1", matrix)
        campaign(st, "c1c1c1c1c1c1", [("ext4-ordered-fsync", "7.0.0", [C, C], 0.1)])
        d = campaign_diff.diff_campaigns(st, "a1a1a1a1a1a1", "b1b1b1b1b1b1")
        assert [(p.diff.a.guest_kernel, p.diff.b.guest_kernel) for p in d.pairs] == [
            (OLD, OLD),
            (NEW, NEW),
        ]
        assert not d.only_a and not d.only_b
        d = campaign_diff.diff_campaigns(st, "a1a1a1a1a1a1", "c1c1c1c1c1c1")
        assert d.pairs == [] and len(d.only_a) == 2 and len(d.only_b) == 1


def test_results_diff_of_two_campaigns_prints_and_dumps_json(
    two_kernels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(two_kernels)]
    assert run_results_cli(["results", "diff", "a0a0a0a0a0a0", "b0b0b0b0b0b0", *db]) == 0
    text = capsys.readouterr().out
    assert "fua-003" in text and "2.00x" in text and "only in camp-b0b0b0b0b0b0" in text
    assert run_results_cli(["results", "diff", "a0a0", "b0b0", "--json", *db]) == 0
    out = json.loads(capsys.readouterr().out)
    ext4 = next(p for p in out["pairs"] if p["cell"].startswith("ext4"))
    assert [c["state_id"] for c in ext4["changes"]] == ["fua-001", "fua-003"]
    assert next(p["ratio"] for p in ext4["phases"] if p["phase"] == "fsck") == pytest.approx(2.0)
    assert [u["status"] for u in out["only_a"]] == ["failed"]


def test_a_run_and_a_campaign_do_not_diff(two_kernels: Path) -> None:
    with Store.open(two_kernels) as st:
        run = st.campaign_runs("a0a0a0a0a0a0")[0].run_id
        assert run is not None
        with pytest.raises(InputError, match="not a campaign id"):
            campaign_diff.campaign_ids(st, run, "b0b0b0b0b0b0")
        assert campaign_diff.campaign_ids(st, run, run) is None  # two runs: the run diff
