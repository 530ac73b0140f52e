"""Charts render from a synthetic store (real SQLite) into PNG files."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from harness.errors import InputError
from harness.report import plots
from harness.store.db import Store

PNG = b"\x89PNG\r\n\x1a\n"


def test_recovery_and_crashmap(db: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, ids = db
    with Store.open(path) as st:
        a = plots.plot_recovery(st, ["fs", "data_mode"], tmp_path / "r.png")
        h = st.execute("SELECT log_hash FROM run_logs WHERE run_id = ?", (ids["ordered"],))[0][0]
        st.execute("INSERT INTO log_events VALUES (?, 3, 'fua', NULL), (?, 9, 'mark', 'm')", (h, h))
        assert plots.log_events(st, ids["ordered"]) == {"flush": [], "fua": [3], "mark": [9]}
        b = plots.plot_crashmap(st, ids["ordered"][:5], tmp_path / "c.png")
        # the log file is gone: the map still renders, saying so
        c = plots.plot_crashmap(st, ids["xfs"], tmp_path / "d.png")
    for p in (a, b, c):
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000


def test_empty_and_bad_input(db: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path, _ = db
    with Store.open(path) as st:
        with pytest.raises(plots.NoData, match="resilver"):
            plots.plot_scans(st, ["layout", "fill"], tmp_path / "z.png")
        with pytest.raises(InputError):
            plots.plot_recovery(st, ["colour"], tmp_path / "x.png")
        with pytest.raises(InputError):
            plots.plot_crashmap(st, "nosuchrun", tmp_path / "x.png")
    assert not (tmp_path / "z.png").exists()
