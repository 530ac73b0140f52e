"""fsstress (generic/482's workload): generic/482's command line, the binary a recording
copies into its guest, a build from a checkout, and the scenario keys. The recording
itself is in test_fsstress_vm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import proc
from harness.config import scenario
from harness.config.workloads import FsstressWorkload
from harness.crashstate import recording
from harness.errors import HarnessError, InputError
from harness.experiments.crash import experiment
from harness.record import fsstress


def test_argv_is_generic_482s_with_the_seed() -> None:
    assert fsstress.argv("/g/fsstress", "/mnt/test", ops=512, procs=2, seed=7) == [
        "/g/fsstress", "-w", "-d", "/mnt/test", "-n", "512", "-p", "2", "-s", "7",
    ]  # fmt: skip
    with pytest.raises(HarnessError):
        fsstress.argv("f", "/mnt", ops=0, procs=1, seed=1)


@pytest.mark.parametrize(
    ("cpus", "given", "procs"), [(2, None, 2), (64, None, 8), (0, None, 1), (2, 5, 5)]
)
def test_procs_are_the_cpus_capped_at_8_unless_given(
    cpus: int, given: int | None, procs: int
) -> None:
    assert fsstress.procs_for(cpus, given) == procs


def test_a_missing_binary_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(HarnessError) as e:
        fsstress.require()
    assert "scenario image fsstress" in (e.value.hint or "")
    with pytest.raises(InputError) as bad:
        fsstress.require(str(tmp_path / "nope"))
    assert "workload.binary" in bad.value.message and "nope" in bad.value.message
    # the scenario says so before any guest boots
    sc = scenario.load("fsstress-482-ci")
    with pytest.raises(HarnessError, match="fsstress was not found"):
        experiment.CrashReplay.preflight(sc)


def test_build_compiles_a_checkouts_fsstress_statically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    checkout = tmp_path / "xfstests"
    (checkout / "ltp").mkdir(parents=True)
    (checkout / "src").mkdir()
    (checkout / "include").mkdir()
    # a stand-in with fsstress's include of the (empty) config.h the build provides
    (checkout / "src" / "global.h").write_text("#include <config.h>\n#include <stdio.h>\n")
    (checkout / "ltp" / "fsstress.c").write_text(
        '#include "global.h"\nint main(void) { puts(XFS_DEFINED); return 0; }\n'
        "#ifndef XFS\n#error XFS\n#endif\n".replace("XFS_DEFINED", '"built"')
    )
    info = fsstress.build(checkout)
    built = fsstress.require()
    assert built == fsstress.binary() and info["binary"] == str(built)
    assert proc.run([str(built)]).stdout.strip() == "built"
    ldd = proc.run(["ldd", str(built)], check=False)
    assert "not a dynamic executable" in ldd.stdout + ldd.stderr  # any guest's libc will do
    kept = json.loads(built.with_suffix(".json").read_text())
    assert kept["binary_sha256"] == fsstress.digest(built) and kept["source"].endswith(
        "ltp/fsstress.c"
    )
    with pytest.raises(InputError, match="not an xfstests checkout"):
        fsstress.build(tmp_path)


def test_fsstress_scenarios_and_their_bad_keys() -> None:
    sc = scenario.load("fsstress-482")
    w = sc.workload
    assert isinstance(w, FsstressWorkload) and (w.ops, w.procs) == (512, None)
    assert sc.fs.disk_size == 200 << 20 and w.keep_log == "logs/generic-482.log"
    ci = scenario.load("fsstress-482-ci")
    assert isinstance(ci.workload, FsstressWorkload) and ci.crash.max_states <= 10
    spec = recording.workload_spec(scenario.load("fsstress-482", ["workload.procs=4"]))
    assert (spec.type, spec.ops, spec.procs) == ("fsstress", 512, 4)
    for bad, words in (
        ("workload.keep_log=/etc/x", "leaves the results directory"),
        ("workload.keep_log=../x", "leaves the results directory"),
        ("workload.procs=0", "at least 1"),
    ):
        with pytest.raises(InputError) as e:
            scenario.load("fsstress-482", [bad])
        assert words in str(e.value) + (e.value.detail or ""), (bad, e.value)


def test_keep_log_replaces_an_earlier_copy(tmp_path: Path) -> None:
    log = tmp_path / "log.raw"
    log.write_bytes(b"new")
    dest = tmp_path / "results" / "logs" / "generic-482.log"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"old")
    recording.keep_log(log, dest)
    assert dest.read_bytes() == b"new" and not dest.with_name(dest.name + ".part").exists()
