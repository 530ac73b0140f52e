"""The proof of a generated fstests test (harness/triage/fstest.py ``prove``): fstests'
``./check`` with it in lab guests on the kernel with the bug (it must fail) and on one
without (it must pass). Needs a built xfstests checkout (``CRASHLAB_XFSTESTS``, else
skipped), the kernels 6.1.0-54-amd64 and 6.1.0-55-amd64 (``scenario kernel add``) and
boots two guests: the known bug 5254d4181add of tests/data/fstests/."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.fstests import check
from harness.triage import finding, fstest
from tests.test_fstests_gen import STATE, recorded

pytestmark = pytest.mark.vm


@pytest.fixture()
def xfstests(tmp_path: Path) -> Path:
    given = os.environ.get("CRASHLAB_XFSTESTS")
    if not given or not (Path(given) / "check").is_file():
        pytest.skip(f"no xfstests checkout (CRASHLAB_XFSTESTS): {check.CLONE}, then make")
    copy = tmp_path / "xfstests"
    shutil.copytree(given, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", "results"))
    return copy


def test_the_generated_test_fails_with_the_bug_and_passes_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xfstests: Path
) -> None:
    # The lab's own kernel store and images: the guests boot the real packages.
    tr = finding.load(STATE, recorded(tmp_path, monkeypatch))
    w = fstest.write(tr, xfstests)
    facts = fstest.prove(tr, w, xfstests, "6.1.0-55-amd64")
    print(json.dumps(facts, indent=1))
    assert facts["proof"]["bad"]["verdict"] == "failed"
    assert facts["proof"]["good"]["verdict"] == "passed"
    assert (
        "Proven: it fails with the bug and passes without it."
        in (tr.folder / "README.md").read_text()
    )
