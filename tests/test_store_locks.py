"""A store stays whole while a campaign keeps it open and another process reads it.

A campaign holds its store open while each run opens it again in the same process; meanwhile
`scenario campaign status`, `results` or datasette read it from another process. Opening
the file other than through SQLite (to look at its header) and closing that descriptor
dropped every POSIX lock of the process's SQLite connections; the reader, finding no other
user, checkpointed and removed the WAL under the live writer, and the store was corrupt
("file is not a database": seen on a mutants campaign, session 8)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from harness.store.db import Store

READER = """
import sys
from pathlib import Path
from harness.store.db import Store
with Store.open(Path(sys.argv[1]), create=False) as st:
    st.runs()
"""


def test_a_reader_elsewhere_never_corrupts_a_store_held_open(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db) as engine:  # the campaign's connection, open throughout
        ids = []
        for n in range(5):
            with Store.open(db) as run:  # each run opens the store again, in-process
                ids.append(run.begin_run("s", "crash", {"n": n}, 1))
            ids.append(engine.begin_run("s", "crash", {"engine": n}, 1))
            r = subprocess.run(
                [sys.executable, "-c", READER, str(db)], capture_output=True, text=True
            )
            assert r.returncode == 0, r.stderr
            ids.append(engine.begin_run("s", "crash", {"after": n}, 1))
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {row[0] for row in con.execute("SELECT id FROM runs")}
    assert stored == set(ids)
