"""A consistent copy of a store file, for readers that must never touch the live one
(``scenario results serve`` hands datasette the copy)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.errors import InputError
from harness.store.db import Store


def snapshot(db: Path, dest: Path) -> None:
    """A consistent copy of the store at ``db`` in ``dest`` (WAL pages included).

    :raise InputError: ``db`` is missing or not a crashlab results file.
    """
    # Store.open refuses foreign or damaged files with a clear message (and migrates ours).
    with Store.open(db, create=False):
        pass
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    dst = sqlite3.connect(dest)
    try:
        src.backup(dst)
        # The copy keeps the source's WAL flag; a rollback journal keeps the snapshot one
        # self-contained file, which immutable mode reads completely.
        dst.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error as e:
        raise InputError(f"{db}: cannot take a snapshot: {e}") from None
    finally:
        src.close()
        dst.close()
