"""tools.require: the lab's own build first, PATH's answer remembered only while it can
still run, a missing tool a ToolMissing that names its package."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import tools
from harness.errors import ToolMissing

TOOL = "crashlab-test-tool"


def program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / TOOL
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return p


def test_require_follows_what_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    with pytest.raises(ToolMissing):
        tools.require(TOOL)
    a, b = program(tmp_path / "a"), program(tmp_path / "b")  # installed since: found
    assert tools.require(TOOL) == str(a)
    assert tools.require(TOOL) == str(a)  # remembered
    a.unlink()
    assert tools.require(TOOL) == str(b)  # the remembered one went: looked up again
    own = program(tmp_path / "cache" / "bin")  # the lab built its own meanwhile
    assert tools.require(TOOL) == str(own)
    own.unlink()
    b.unlink()
    with pytest.raises(ToolMissing):
        tools.require(TOOL)
