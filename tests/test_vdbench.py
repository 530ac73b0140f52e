"""``scenario import vdbench``: the seeds' own parameter files (scenarios/vdbench/) become
workload scenarios whose fio jobs fio accepts, and everything outside the subset is
refused with its name and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import paths
from harness.cli.main import main
from harness.config import scenario, vdbench
from harness.errors import InputError
from harness.experiments.workload.experiment import check_job
from harness.experiments.workload.settings import WorkloadScenario

SEEDS = paths.REPO / "scenarios" / "vdbench"
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not on the host")


def job_lines(name: str) -> list[str]:
    data = vdbench.import_file(SEEDS / name)
    return [ln for ln in data["fio"]["job"].splitlines() if ln]


def test_seed000_zfs_block_workload() -> None:
    data = vdbench.import_file(SEEDS / "seed000-zfs.vdb")
    job = data["fio"]["job"].splitlines()
    assert data["fio"]["size"] == "1G" and data["fio"]["runtime"] == 120
    for opt in ("bs=4k", "rw=randrw", "rwmixread=50", "percentage_random=50", "filename=testfile"):
        assert opt in job
    # rhpct=10: 10 % of the random I/O to vdbench's 1 MiB hit area, 0.1 % of 1 GiB
    assert "random_distribution=zoned:10/0.1:90/99.9" in job
    assert any("rhpct=10 (line 3)" in n for n in data["_notes"])


def test_seed000_ext4_threads_and_default_seek() -> None:
    job = job_lines("seed000-ext4.vdb")
    assert "numjobs=4" in job and "rwmixread=70" in job and "rw=randrw" in job
    assert not any(ln.startswith("percentage_random") for ln in job)  # seekpct 100 default


def test_seed001_dedup_file_workload() -> None:
    data = vdbench.import_file(SEEDS / "seed001-dedup.vdb")
    job = data["fio"]["job"].splitlines()
    assert "dedupe_percentage=50" in job
    # fio's working-set mode takes one file per job: with 8 files, dedupsets is not mapped
    assert not any(ln.startswith("dedupe_mode") for ln in job)
    assert any(n.startswith("dedupsets=50%: not mapped") for n in data["_notes"])
    # depth=2, width=2, files=2: 2**2 * 2 = 8 files of 2048k
    assert "nrfiles=8" in job and data["fio"]["size"] == "16M"
    assert "rw=read" in job and "file_service_type=random" in job
    assert "rate_iops=50" in job and "numjobs=2" in job  # fwdrate=100 over 2 threads
    assert {c["type"] for c in data["cells"]} == {"zfs", "btrfs"}
    assert data["cells"][0]["properties"] == {"dedup": "on", "recordsize": "4K"}


def test_seed001_cow_continuation_line_and_stopafter() -> None:
    job = job_lines("seed001-cow.vdb")
    # the fwd= line continues on the next line (it ends in a comma)
    assert "file_service_type=random:100" in job and "numjobs=8" in job
    assert "rw=write" in job and "overwrite=1" in job  # format=yes: files exist first


@needs_fio
@pytest.mark.parametrize("name", sorted(p.name for p in SEEDS.glob("*.vdb")))
def test_every_seed_imports_to_a_scenario_fio_accepts(name: str, tmp_path: Path) -> None:
    out = tmp_path / "imported.toml"
    assert main(["import", "vdbench", str(SEEDS / name), "-o", str(out)]) == 0
    sc = scenario.load(out)
    assert isinstance(sc, WorkloadScenario)
    check_job(sc)
    assert out.read_text().startswith("# imported from")


def test_dedupsets_maps_to_a_working_set_on_one_file(tmp_path: Path) -> None:
    p = write(tmp_path, "dedupunit=4k,dedupratio=2,dedupsets=50%\n" + BASE)
    job = vdbench.import_file(p)["fio"]["job"].splitlines()
    assert "dedupe_mode=working_set" in job and "dedupe_working_set_percentage=50" in job


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.vdb"
    p.write_text(text)
    return p


BASE = "sd=sd1,lun=/x/f,size=64m\nwd=wd1,sd=sd1,xfersize=4k,rdpct=50\nrd=rd1,wd=wd1,elapsed=5\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (BASE.replace("rdpct=50", "rdpct=50,whpct=3"), r"w\.vdb:2: parameter 'whpct' is not"),
        (BASE + "hd=localhost\n", r"w\.vdb:4: parameter 'hd'"),
        (BASE.replace("xfersize=4k", "xfersize=(4k,50,8k,50)"), r":2: xfersize=.*distribution"),
        (BASE.replace("rdpct=50", "rdpct=150"), r":2: rdpct='150': must be between 0 and 100"),
        (BASE + "rd=rd2,wd=wd1\n", r":4: the import takes exactly one rd="),
        (BASE.replace("wd=wd1,elapsed", "wd=wd9,elapsed"), r":3: wd='wd9': no wd= record"),
        (
            "fsd=f,depth=1,width=1,files=1,size=1m\nfwd=w,fsd=f,operation=create\nrd=r,fwd=w\n",
            r":2: operation='create': only read and write",
        ),
        ("dedupunit=8k,dedupratio=2\n" + BASE, r":1: dedupunit='8k': differs from"),
        (BASE.replace("size=64m", "size=lots"), r":1: size='lots': expected a size"),
        (BASE.replace("rdpct=50", "rdpct"), r":2: 'rdpct' is not a parameter=value pair"),
    ],
)
def test_bad_input_names_the_parameter_and_line(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        vdbench.import_file(write(tmp_path, text))


@needs_fio
def test_a_job_fio_rejects_is_refused_naming_its_origin(tmp_path: Path) -> None:
    p = tmp_path / "badjob.toml"
    p.write_text(
        'kind = "workload"\ndescription = "x"\ncells = [{type = "ext2"}]\n'
        '[fio]\norigin = "my.vdb"\njob = """\n[w]\nrw=randwrite\nbogus_option=3\n"""\n'
    )
    sc = scenario.load(p)
    assert isinstance(sc, WorkloadScenario)
    with pytest.raises(InputError, match=r"my\.vdb: fio rejects the job: .*bogus_option"):
        check_job(sc)


def test_unknown_zfs_property_is_input_error() -> None:
    with pytest.raises(InputError, match=r"cells\[0\]\.properties\.dedupe.*unknown ZFS property"):
        scenario.load("dedup-2to1", ('cells=[{type="zfs", properties={dedupe="on"}}]',))
    with pytest.raises(InputError, match="ZFS properties on a btrfs cell"):
        scenario.load("dedup-2to1", ('cells=[{type="btrfs", properties={dedup="on"}}]',))


def test_import_does_not_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "x.toml"
    out.write_text("keep")
    assert main(["import", "vdbench", str(SEEDS / "seed000-zfs.vdb"), "-o", str(out)]) == 2
    assert out.read_text() == "keep"
