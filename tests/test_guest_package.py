"""The guest gets the model and its programs as the package they are (issue 45): the
same files the host imports, stdlib only, relative imports only, one copy of each module."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from harness import paths
from harness.model import contract
from harness.record import guestfiles, recorder
from tests import guestcopy

SHARED = [paths.REPO / "harness" / p for p in guestfiles.PACKAGES]


def _modules() -> list[Path]:
    return sorted(f for d in SHARED for f in d.rglob("*.py"))


def test_the_archive_holds_the_packages_byte_for_byte_and_a_launcher_per_program() -> None:
    with tarfile.open(fileobj=io.BytesIO(guestfiles.archive())) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for f in _modules():
        assert got[str(f.relative_to(paths.REPO))] == f.read_bytes()
    launchers = {n[:-3] for n in got if "/" not in n}
    assert launchers == set(guestfiles.programs())
    assert {"opgen", "checkstate", "ace", "recoveryload"} <= launchers


def test_install_writes_the_archive_and_unpacks_it_in_the_guest_folder() -> None:
    said: list[list[str]] = []
    written: dict[str, bytes] = {}

    class Fake:
        def run(self, argv: list[str], check: bool = False) -> None:
            said.append(argv)

        def write_file(self, path: str, data: bytes) -> None:
            written[path] = data

    guest: Any = Fake()
    recorder.install_scripts(guest)
    tar = f"{recorder.GUEST_DIR}/programs.tar"
    assert written[tar] == guestfiles.archive()
    assert ["tar", "-xf", tar, "-C", recorder.GUEST_DIR] in said


def test_the_guest_packages_import_only_the_stdlib_and_each_other_relatively() -> None:
    wrong = []
    for f in _modules():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__":
                    wrong.append(f"{f.relative_to(paths.REPO)}: {name}")
    assert wrong == []


def test_no_module_of_the_harness_changes_the_import_path() -> None:
    found = [
        str(f.relative_to(paths.REPO))
        for f in (paths.REPO / "harness").rglob("*.py")
        if "sys.path.insert" in f.read_text() or "sys.path[:0]" in f.read_text()
    ]
    assert found == []


def test_a_program_runs_from_the_unpacked_archive_without_the_venv(tmp_path: Path) -> None:
    """As in the guest: python -I (no PYTHONPATH, no site-packages) in the unpacked
    folder; the program answers through the contract, and every guest module imports
    there with one contract module among them all."""
    guestcopy.unpack(tmp_path)
    out = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "recoveryload.py"), "stop", "--pid", "999999999"],
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    said = contract.Stopped.from_json(out.stdout)
    assert said == contract.Stopped(stopped=True, was_running=False, seconds=0.0)
    modules = sorted(f"harness.guest.{p}" for p in guestfiles.programs())
    check = f"import sys; sys.path[:0] = [{str(tmp_path)!r}]; import {', '.join(modules)}"
    check += "; import harness.model.contract as c, harness.guest.runner as r"
    check += "; assert r.contract is c and harness.guest.checkstate.contract is c"
    check += "; assert harness.__file__.startswith(sys.path[0])"
    check += "; assert not [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml')]"
    subprocess.run([sys.executable, "-I", "-c", check], check=True, cwd="/")
