"""Op families (harness/model/families.py): exact counts, seeded order, bad input."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.experiments.search import budget
from harness.guest import opgen
from harness.model import ace, acespace, families, generate
from harness.model.ops import Op

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("grammar", ace.GRAMMARS)
def test_counts_by_dynamic_programming_equal_decoding_every_seq2_index(grammar: str) -> None:
    """The closed form ``count`` is checked against enumeration: every index of seq-2
    decoded, judged valid and matched against each family."""
    got = dict.fromkeys(["", *families.FAMILIES], 0)
    for i in range(ace.space(2, grammar)):
        picked = ace.decode(2, i, grammar)
        if not acespace.valid(picked):
            continue
        got[""] += 1
        for f in families.FAMILIES:
            got[f] += families.matches(f, picked)
    assert got == {f: acespace.count(2, grammar, f) for f in got}


def test_the_family_counts_printed_for_the_note() -> None:
    """The exact counts docs/search.md prints, and seq-3's by the same walk."""
    assert acespace.count(2) == 51097 and acespace.count(2, "ace", "relog") == 7708
    want = {
        ("ace", 2): (51097, 7708, 160, 703, 0, 1008, 0),
        ("ace-x", 2): (85754, 11060, 290, 2205, 2462, 1650, 0),
        ("ace-n", 2): (87770, 11060, 338, 2266, 2494, 1650, 69),
        ("ace", 3): (11534064, 4117972, 71272, 183540, 0, 432516, 0),
        ("ace-x", 3): (24006506, 7627896, 160018, 865981, 874470, 907847, 0),
        ("ace-n", 3): (24890909, 7741406, 206240, 903937, 897992, 920777, 58578),
    }
    for (g, seq), counts in want.items():
        assert tuple(acespace.count(seq, g, f) for f in ["", *families.FAMILIES]) == counts


def test_relog_is_the_family_and_the_old_setting_its_alias() -> None:
    picked = acespace.selection(2, 0, 1, classes=["append", "link", "rename"], relog=True)
    assert picked == acespace.selection(
        2, 0, 1, classes=["append", "link", "rename"], family="relog"
    )
    old = scenario.load("ace-seq2", ["workload.relog=true"])
    assert old.workload.chosen_family() == "relog"


def test_each_family_s_shape() -> None:
    core = {(c.op_class, c.path, c.dst): c for c in ace.cores("ace-x")}
    unlink, creat = core[("unlink", "foo", "")], core[("creat", "bar", "")]
    rename = core[("rename", "A/foo", "bar")]
    gone, over = core[("unlink", "A/foo", "")], core[("rename-over", "foo", "A/foo")]
    assert families.matches("reuse-name", [(gone, ("none", "")), (over, ("fsync_dir", "A"))])
    assert not families.matches("reuse-name", [(unlink, ("sync", "")), (creat, ("fsync", "bar"))])
    move = core[("rename-dir", "A", "B")]
    assert families.matches("dir-move", [(move, ("fsync_dir", ""))])  # the old parent
    assert families.matches("dir-move", [(move, ("none", "")), (creat, ("fsync_dir", ""))])
    assert not families.matches("dir-move", [(move, ("sync", "")), (creat, ("fsync_dir", ""))])
    held = core[("unlink-held", "foo", "")]
    assert families.matches("held-fd", [(held, ("fsync_fd", "@"))])
    assert not families.matches("held-fd", [(held, ("fsync_dir", ""))])
    append = core[("append", "A/foo", "")]
    assert families.matches("data-ns-mix", [(append, ("none", "")), (rename, ("fsync", "bar"))])
    apart = [(append, ("fsync", "A/foo")), (rename, ("fsync", "bar"))]
    assert not families.matches("data-ns-mix", apart)
    other = core[("append", "foo", "")]
    assert not families.matches("data-ns-mix", [(other, ("none", "")), (rename, ("fsync", "bar"))])
    n = {(c.op_class, c.path, c.dst): c for c in ace.cores("ace-n")}
    mkdir, link = n[("mkdir", "B", "")], n[("link", "foo", "B/bar")]
    # bfe3d755ef7c's steps: the link into B, made since the sync, then the root's fsync
    assert families.matches("new-dir-name", [(mkdir, ("none", "")), (link, ("fsync_dir", ""))])
    assert not families.matches("new-dir-name", [(mkdir, ("sync", "")), (link, ("fsync_dir", ""))])
    assert not families.matches("new-dir-name", [(mkdir, ("fsync_dir", "")), (creat, ("sync", ""))])


def test_the_seeded_order_is_a_permutation_fixed_by_the_seed() -> None:
    fam = [i for i in range(ace.space(2)) if acespace.valid(ace.decode(2, i))
           and families.matches("dir-move", ace.decode(2, i))]  # fmt: skip
    one, again = (
        list(acespace.shuffled(2, 7, family="dir-move")),
        list(acespace.shuffled(2, 7, family="dir-move")),
    )
    other = list(acespace.shuffled(2, 8, family="dir-move"))
    assert one == again and sorted(one) == sorted(other) == fam and one != other


@pytest.mark.parametrize(
    ("grammar", "family"), [("ace-x", "relog"), ("ace-n", "held-fd"), ("ace", "")]
)
def test_the_order_computed_from_members_is_the_walked_one(grammar: str, family: str) -> None:
    """``ordered`` (the census's nights) sorts the family's members by the permutation's
    inverse instead of walking the index space: the same list ``shuffled`` walks."""
    walked = list(acespace.shuffled(2, 5, grammar, family))
    assert acespace.ordered(2, 5, grammar, family) == walked
    assert list(acespace.members(2, grammar, family)) == sorted(walked)
    assert len(walked) == acespace.count(2, grammar, family)


def test_a_budgeted_run_taken_up_again_goes_on_where_it_stopped() -> None:
    w = scenario.load("ace-seq2", ["workload.family=dir-move", "workload.budget=90m",
                                   "workload.sample=0"]).workload  # fmt: skip
    whole = [d["id"] for d in budget.order(w, 3)]
    recorded = set(whole[:25])  # the first night stopped after 25
    done, rest = budget.recorded_prefix(budget.order(w, 3), lambda d: d["id"] in recorded or None)
    assert [d["id"] for d in done] == whole[:25]
    assert [d["id"] for d in itertools.islice(rest, 5)] == whole[25:30]
    assert len(whole) == 703


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("workload.family=relgo", "relog"),
        ("workload.family=dirmove", "dir-move"),
        ("workload.budget=8 hours", "not a duration"),
        ("workload.budget=8x", "not a duration"),
        ("workload.budget=0s", "not a duration"),
        ("workload.budget=1.5h", "not a duration"),
    ],
)
def test_bad_family_or_budget_names_the_key(setting: str, said: str) -> None:
    with pytest.raises(InputError) as e:
        scenario.load("ace-seq2", ["workload.sample=0", setting])
    text = str(e.value) + str(getattr(e.value, "hint", ""))
    assert said in text and setting.split("=")[0].split(".")[1] in text


def test_held_fd_needs_ace_x_and_durations_parse() -> None:
    for family, grammar in (("held-fd", "ace"), ("new-dir-name", "ace-x")):
        with pytest.raises(InputError, match=f"{family} needs a"):
            scenario.load("ace-seq2", [f"workload.family={family}", f"workload.grammar={grammar}"])
    scenario.load("ace-seq2", ["workload.family=new-dir-name", "workload.grammar=ace-n"])
    sc = scenario.load("ace-seq2", ["workload.family=held-fd", "workload.grammar=ace-x",
                                    "workload.budget=1h30m", "workload.sample=0"])  # fmt: skip
    assert sc.workload.budget_seconds() == 5400
    assert scenario.load("ace-seq3", []).workload.budget_seconds() == 3600


def test_seq_4_is_taken_by_indices_sample_or_budget_never_whole() -> None:
    with pytest.raises(InputError, match="too many to take whole"):
        scenario.load("ace-seq3", ["workload.seq=4", "workload.budget=", "workload.sample=0"])
    sc = scenario.load("ace-seq3", ["workload.seq=4", "workload.grammar=ace-n"])  # its budget
    assert sc.workload.seq == 4 and sc.workload.budget_seconds() == 3600


def test_an_unknown_family_exits_2_with_the_closest_names(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "harness", "run", "ace-seq3", "--set", "workload.family=reuse",
         "--db", str(tmp_path / "lab.db")],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "reuse-name" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "lab.db").exists()


def test_ace_count_prints_each_family() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "harness.guest.ace", "count", "--seq", "2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "ace seq-2: 51,097 valid of 56,445 indices; relog 7,708;" in r.stdout
    assert "data-ns-mix 1,008" in r.stdout


def test_the_nightly_runs_every_family_on_the_newest_6_12_within_its_budget() -> None:
    from harness import paths
    from harness.config import campaign

    camp = campaign.load(paths.REPO / "campaigns" / "nightly.toml")
    runs = [scenario.load(el.scenario, el.overrides) for el in camp.elements]
    fam = [sc for sc in runs if getattr(getattr(sc, "workload", None), "budget", "")]
    ace_x = {f for f in families.FAMILIES if "ace-x" in families.GRAMMARS_OF.get(f, ("ace-x",))}
    assert {(str(sc.fs.type), sc.workload.family) for sc in fam} == {
        (fs, f) for fs in ("btrfs", "ext4", "xfs") for f in ace_x
    } | {("btrfs", "new-dir-name")}
    assert {sc.kernel for sc in fam} == {"6.12.117+deb12-amd64"}
    assert sum(sc.workload.budget_seconds() for sc in fam) == 230 * 60  # the comments'
    assert sum(sc.fs.fast_commit for sc in fam) == 1  # ext4's relog under fast commits
    # the three btrfs fixes' slices, whole, beside the families (kernels-search's own)
    slices = [sc for sc in runs if getattr(getattr(sc, "workload", None), "indices", ())]
    assert sorted(len(sc.workload.indices) for sc in slices) == [16, 24]


def test_the_workloads_table_by_fs_and_family_from_a_fixture_store(tmp_path: Path) -> None:
    """Counts from the store's outcome classes (outcome.py's rule), phases' seconds from
    the workloads, the checks and run_phases; a phase no row holds prints as '-'."""
    import io
    import json as json_

    from rich.console import Console

    from harness.report import query
    from harness.report.search import print_workloads
    from harness.store.db import Store
    from tests.synth import add_every_kind

    with Store.open(tmp_path / "lab.db") as st:
        search = add_every_kind(st)["search"]
        st.add_phase_seconds(search, "boot:seq1-000000", "boot", 20.0)
        st.add_phase_seconds(search, "cut:seq1-000001", "cut", 0.5)
        table = query.grouped(st, "workloads", ["fs", "family"])
    (g,) = table.groups
    assert g.key == ("ext4", "all")
    counted = {k: g.counts[k] for k in ("workloads", "generated", "distinct", "checked")}
    assert counted == {"workloads": 2, "generated": 4, "distinct": 4, "checked": 4}
    assert g.counts["findings"] == 1 == g.counts["data_loss"]
    total = {p: s.n * s.mean for p, s in g.stats.items()}
    assert total == pytest.approx({"record": 5.0, "boot": 20.0, "cut": 0.5, "host check": 0.4})
    out = io.StringIO()
    print_workloads(Console(file=out, width=250), table)
    row = out.getvalue().splitlines()[-2].split()
    assert row[:7] == ["ext4", "all", "2", "4", "4", "4", "1"] and row[11] == "-", row
    assert json_.dumps(table.to_json())  # --json as well


def test_a_budget_spent_mid_check_leaves_the_run_to_be_taken_up_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the host, the recorded fixture of tests/data/search: a budget spent after a few
    states ends the run interrupted; the same command again resumes that run, records
    nothing more and checks only the states left, until the run is done."""
    from types import SimpleNamespace

    from harness.crashstate import workloads as record
    from harness.experiments import lifecycle
    from harness.experiments.search import experiment
    from harness.store.db import RunStatus, Store
    from tests.synth import without_image
    from tests.test_triage_search import FACTS, SETTINGS, lay_fixture

    without_image(tmp_path, monkeypatch)
    recorded: list[str] = []

    def lay(rdir: Path, fs: object, workloads: list[dict[str, object]], **kw: object) -> object:
        recorded.extend(str(w["id"]) for w in workloads)
        return lay_fixture(rdir, fs, workloads, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(record, "record_batch", lay)
    monkeypatch.setattr(budget, "order", lambda w, seed: iter([ace.describe(1, FACTS["index"])]))
    settings = [s for s in SETTINGS if not s.startswith("workload.indices")]
    sc = scenario.load("ace-seq1-ci", [*settings, "workload.budget=1s"])
    db = tmp_path / "lab.sqlite"
    runs: list[str] = []
    checked: list[int] = []
    for _ in range(30):
        clock = itertools.count()  # a tenth of a second a reading: the budget is 10 readings
        monkeypatch.setattr(
            experiment, "time", SimpleNamespace(monotonic=lambda c=clock: next(c) / 10)
        )
        r = lifecycle.execute(sc, db=db)
        runs.append(r.run_id)
        checked.append(r.earlier)  # states judged before this run took it up
        with Store.open(db, create=False) as st:
            if st.run(r.run_id).status is RunStatus.DONE:
                break
    assert len(set(runs)) == 1 and len(runs) >= 2, checked
    assert recorded == [FACTS["id"]]  # recorded once, taken again after
    assert checked[0] == 0 and checked == sorted(set(checked)) and checked[-1] <= r.items, checked
    assert 0 < checked[1] < r.items, checked  # the first run stopped mid-way


def _drawn(seed: int, family: str, bug_ops: bool = False) -> list[Any]:
    ops = generate.draw(seed, 20, 8, 64 * 1024, bug_ops, True, bug_ops)
    return ops if not family or families.matches_ops(family, ops) else []


def test_the_op_generator_draws_a_family_by_seed(tmp_path: Path) -> None:
    """workload.family on the op generator: seeds drawn from the run's until one's ops
    are of the family; the oracle keeps that seed, so triage draws the same ops."""
    for family, bug_ops in (("new-dir-name", False), ("held-fd", True)):
        plain = sum(bool(_drawn(s, family, bug_ops)) for s in range(1, 101))
        assert 0 < plain < 100  # the filter does something: some seeds are, some not
        extra = ["--files", "8", "--max-size", str(64 * 1024), "--family", family]
        extra += ["--extended", "--bug-ops"] if bug_ops else []
        for seed in (1, 2, 3):
            root, doc = tmp_path / f"{family}{seed}", tmp_path / f"{family}{seed}.json"
            root.mkdir()
            argv = ["run", "--root", str(root), "--seed", str(seed), "--ops", "20"]
            assert opgen.main([*argv, "--mark-cmd", "none", "--oracle", str(doc), *extra]) == 0
            kept = json.loads(doc.read_text())
            assert kept["family"] == family
            assert _drawn(kept["seed"], family, bug_ops)  # the seed kept draws the family
            if _drawn(seed, family, bug_ops):
                assert kept["seed"] == seed  # a seed of the family is its own


def test_held_fd_of_the_op_generator_needs_the_name_gone() -> None:
    opened = [Op("create", "f1"), Op("open", "f1", fd="h2")]
    assert not families.matches_ops("held-fd", [*opened, Op("fsync_fd", fd="h2")])
    assert families.matches_ops("held-fd", [*opened, Op("unlink", "f1"), Op("fsync_fd", fd="h2")])
    # through a descriptor fsync'd by its name, a later write is a relog
    assert families.matches_ops("relog", [*opened, Op("fsync_fd", fd="h2"), Op("append", "f1")])


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("workload.family=reuse-name", "never makes a name again"),
        ("workload.family=dir-move", "never renames a directory"),
        ("workload.family=held-fd", "needs descriptors held across unlink"),
        ("workload.family=relgo", "unknown family 'relgo'"),
    ],
)
def test_a_family_the_op_generator_cannot_draw_is_refused(setting: str, said: str) -> None:
    with pytest.raises(InputError, match=said) as e:
        scenario.load("btrfs-fsync", [setting])
    key, value = setting.split("=")
    assert f"--set {key}={value!r}" in str(e.value)  # not the op count under the tag "ops"
    assert scenario.load("btrfs-fsync", ["workload.family=relog"]).workload.family == "relog"
