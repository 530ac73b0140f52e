"""The census of the year's crash-consistency fixes (campaigns/census.toml, docs/census.md):
the real file loads and agrees with the known-bugs catalogue, bad files are exit 2 with
the key named, and the document's tables are the command's output. No guest."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.campaign import nights
from harness.cli import main as cli
from harness.config import census
from harness.config.census import NEEDS, Reach
from harness.config.settings import load_toml
from harness.errors import InputError
from harness.experiments.search import budget
from harness.model.families import FAMILIES
from harness.report import census as report

REPO = Path(__file__).resolve().parent.parent
CENSUS = REPO / "campaigns" / "census.toml"
KNOWN = REPO / "campaigns" / "known-bugs.toml"


@pytest.fixture(scope="module")
def real() -> census.Census:
    return census.load(CENSUS)


def test_every_caught_fix_is_a_catalogue_bug_with_its_commit(real: census.Census) -> None:
    bugs = {b["name"]: b for b in load_toml(KNOWN)["bug"]}
    caught = real.of(Reach.CAUGHT)
    assert caught
    for f in caught:
        assert bugs[f.bug]["commit"].startswith(f.commit), f.title
        assert bugs[f.bug].get("reproduces", True), f.bug
        assert f.title.startswith(bugs[f.bug]["title"]), f.title


def test_every_reproducible_catalogue_bug_is_caught(real: census.Census) -> None:
    reproducible = {b["name"] for b in load_toml(KNOWN)["bug"] if b.get("reproduces", True)}
    assert {f.bug for f in real.of(Reach.CAUGHT)} == reproducible
    # The one the catalogue keeps as not reproducible is in the census, not as caught.
    masked = next(f for f in real.fixes if f.commit == "999757231c49")
    assert masked.reach is Reach.EXPRESSIBLE


def test_ratios_and_needs_are_counted_from_the_entries(real: census.Census) -> None:
    n = len(real.fixes)
    caught = sum(f.reach is Reach.CAUGHT for f in real.fixes)
    expressible = sum(f.reach is Reach.EXPRESSIBLE for f in real.fixes)
    assert real.ratios() == (caught / n, (caught + expressible) / n)
    assert caught >= 10 and n >= 61  # the catalogue's bugs at least, and the census read
    counts = {k: (named, alone) for k, named, alone in real.needs_counts()}
    not_expressible = real.of(Reach.NOT_EXPRESSIBLE)
    for k, (named, alone) in counts.items():
        assert named == sum(k in f.needs for f in not_expressible)
        assert alone == sum(tuple(f.needs) == (k,) for f in not_expressible)
    assert set(counts) <= set(NEEDS)


def test_packages_are_ordered_pairs(real: census.Census) -> None:
    def key(pkg: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", pkg))

    for f in real.fixes:
        for bad in f.buggy:
            line = bad.split("-")[0] if "deb12" not in bad else "6.12"
            later = [p for p in f.fixed_in if (("deb12" in p) == (line == "6.12"))]
            assert later and key(bad) < key(later[0]), f.title


def _write(tmp_path: Path, fix: str) -> Path:
    shutil.copy(KNOWN, tmp_path / "known-bugs.toml")
    # Every catalogue bug that reproduces must be caught: keep the real caught entries.
    caught = [
        block for block in CENSUS.read_text().split("[[fix]]")[1:] if 'reach = "caught"' in block
    ]
    text = "".join("[[fix]]" + b for b in caught) + "\n[[fix]]\n" + fix
    path = tmp_path / "census.toml"
    path.write_text(text)
    return path


# The bad entry comes after the real caught ones: its index in the file.
CAUGHT = 'reach = "caught"'
BAD = f"fix[{CENSUS.read_text().count(CAUGHT)}]"
GOOD = """commit = ""
title = "xfs: something"
fs = "xfs"
area = "replay"
fixed_in = ["6.12.69+deb12-amd64"]
buggy = ["6.12.57+deb12-amd64"]
basis = "title"
note = "no hash"
"""


@pytest.mark.parametrize(
    ("fix", "message"),
    [
        (GOOD + 'reach = "reachable"\n', f"key '{BAD}.reach' = 'reachable': not one of"),
        (
            GOOD + 'reach = "not-expressible"\nneeds = ["time-travel"]\n',
            f"key '{BAD}.needs[0]' = 'time-travel': not one of",
        ),
        (GOOD + 'reach = "caught"\n', f"key '{BAD}.bug' = '(the default)': a caught fix names"),
        (
            GOOD + 'reach = "caught"\nbug = "no-such-bug"\nnightly = "none"\nnightly_why = "x"\n',
            f"key '{BAD}.bug' = 'no-such-bug': no such [[bug]]",
        ),
        (GOOD + 'reach = "expressible"\nnightly = "none"\nnightly_why = "x"\n', f"'{BAD}.why'"),
        (GOOD + 'reach = "expressible"\nwhy = "x"\nnightly = "relogg"\n', "did you mean"),
        (
            GOOD + 'reach = "expressible"\nwhy = "x"\nnightly = "relog"\n',
            f"key '{BAD}.shapes' = '(the default)': nightly 'relog' gives the shapes it meets",
        ),
        (
            GOOD + 'reach = "expressible"\nwhy = "x"\nnightly = "relog"\n'
            'shapes = ["truncate-zero(foo) fsync(foo); link(foo, bar) fsync_dir"]\n',
            f"key '{BAD}.shapes[0]' = 'truncate-zero(foo) fsync(foo); link(foo, bar) fsync_dir': "
            "'link(foo, bar) fsync_dir' is no ACE step (ace-n's, as describe spells it) "
            "did you mean 'link(foo, bar) fsync_dir()'?",
        ),
    ],
)
def test_bad_census_is_exit_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fix: str, message: str
) -> None:
    path = _write(tmp_path, fix)
    with pytest.raises(InputError) as e:
        census.load(path)
    assert str(path) in e.value.message
    assert cli.main(["campaign", "census", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert message in " ".join((e.value.message + " " + (e.value.hint or "")).split())


def test_caught_with_another_commit_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    text = path.read_text().replace('commit = "5254d4181add"', 'commit = "0123456789ab"', 1)
    path.write_text(text.rstrip().removesuffix("[[fix]]"))
    with pytest.raises(InputError, match=r"btrfs-zero-size-after-link .* is commit 5254d4181add"):
        census.load(path)


def test_a_reproducible_bug_left_out_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + 'reach = "expressible"\nwhy = "x"\nnightly = "none"\n'
                  'nightly_why = "x"\n')  # fmt: skip
    blocks = path.read_text().split("[[fix]]")
    path.write_text("[[fix]]".join(b for b in blocks if "btrfs-zero-size-after-link" not in b))
    with pytest.raises(InputError, match="catches btrfs-zero-size-after-link, which no caught"):
        census.load(path)


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    assert cli.main(["campaign", "census", str(tmp_path / "nope.toml")]) == 2


def test_command_table_json_and_filter(capsys: pytest.CaptureFixture[str]) -> None:
    # The counts read straight off the file's reach keys, apart from the loader.
    fixes = load_toml(CENSUS)["fix"]
    n = {
        r: sum(f["reach"] == r for f in fixes) for r in ("caught", "expressible", "not-expressible")
    }
    assert cli.main(["campaign", "census", str(CENSUS)]) == 0
    out = capsys.readouterr().out
    assert "btrfs-zero-size-after-link" in out and f"reach {n['caught']}/{len(fixes)}" in out
    assert cli.main(["campaign", "census", str(CENSUS), "--json", "--reach", "caught"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["counts"] == n
    assert {f["reach"] for f in got["fixes"]} == {"caught"} and len(got["fixes"]) == n["caught"]
    assert got["ratio_caught"] == round(n["caught"] / len(fixes), 4)
    corrupt = [f for f in fixes if "corrupt-image" in f.get("needs", [])]
    assert got["needs"][0] == {
        "need": "corrupt-image", "fixes": len(corrupt),
        "alone": sum(f["needs"] == ["corrupt-image"] for f in corrupt),
    }  # fmt: skip


def test_doc_tables_are_the_commands_output(real: census.Census) -> None:
    doc = (REPO / "docs" / "census.md").read_text()
    start = doc.index(report.BEGIN) + len(report.BEGIN) + 1
    end = doc.index(report.END)
    assert doc[start:end] == report.markdown(real, nights.nights(real)), (
        "docs/census.md is stale: regenerate its table with `scenario campaign census --markdown`"
    )


def test_each_nightly_family_said_is_where_the_nightly_meets_the_shapes(
    real: census.Census,
) -> None:
    met = nights.nights(real)
    for f in real.fixes:
        if f.nightly in FAMILIES:
            assert any(m.run.endswith(f" {f.nightly}") and m.per_night for m in met[f.title]), (
                f.title
            )
        elif f.nightly == "ace-n-slice":
            assert any("slice" in m.run and m.nights == 1 for m in met[f.title]), f.title
        elif not f.shapes:
            assert met[f.title] == [], f.title  # no shapes: not computed, never "met"


def test_a_position_is_the_walked_order_s_and_nights_divide_it_by_a_night(
    real: census.Census, tmp_path: Path
) -> None:
    # budget.order, the order a budgeted run really records in, walked by hand for the
    # nightly's btrfs relog run: the census's position of the zero-size fix is its.
    fix = next(f for f in real.fixes if f.bug == "btrfs-zero-size-after-link")
    run = next(r for r in nights.runs(real) if r.fs == "btrfs" and r.label.endswith(" relog"))
    want = [tuple(s.split("; ")) for s in fix.shapes]
    walked = budget.order(run.spec, run.seed)
    pos, first = next(
        (n, d) for n, d in enumerate(walked, 1) if tuple(d["ops"].split("; ")) in want
    )
    m = nights.meeting(fix, run)
    assert m is not None and (m.position, m.workload) == (pos, first["id"])
    assert m.per_night == int(20 / 60 * real.nightly.workloads_per_hour)  # its budget is 20m
    # A slower night: the same position over fewer workloads a night.
    slow = census.Nightly(campaign=real.nightly.campaign, workloads_per_hour=30, rate_source="x")
    r2 = nights.Walked(run.label, run.fs, run.spec, run.seed, int(20 / 60 * 30))
    m2 = nights.meeting(fix, r2)
    assert slow.workloads_per_hour == 30 and m2 is not None
    assert m2.nights == -(-pos // 10) and m2.nights > 1


def test_json_gives_each_fix_its_nights(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["campaign", "census", str(CENSUS), "--json", "--reach", "caught"]) == 0
    got = json.loads(capsys.readouterr().out)
    zero = next(f for f in got["fixes"] if f["bug"] == "btrfs-zero-size-after-link")
    assert zero["nights"][0]["nights"] >= 1 and zero["nights"][0]["workload"].startswith("xseq2-")
    assert got["nightly"]["workloads_per_hour"] > 0
