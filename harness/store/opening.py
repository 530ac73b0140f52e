"""Opening a store file: refuse what is not ours (untouched), then migrate it in order,
each migration in its own transaction with its version bump."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from harness import outcome
from harness.errors import HarnessError, InputError
from harness.store.model import APPLICATION_ID
from harness.store.schema import _TABLES, MIGRATIONS, SCHEMA_VERSION

# What the host does to a store (a full disk, another writer past the busy timeout, an
# I/O error), as SQLite words it: a harness error (exit 3), never the file's fault.
HOST_TROUBLE = ("disk is full", "database is locked", "disk I/O error", "unable to open")


def host_trouble(e: sqlite3.OperationalError) -> bool:
    return any(s in str(e) for s in HOST_TROUBLE)


def store_failure(e: BaseException) -> HarnessError | None:
    """An exception that is the host failing the store, as the harness error to report;
    None for anything else (the CLI keeps sqlite3 out of its own code)."""
    if not (isinstance(e, sqlite3.OperationalError) and host_trouble(e)):
        return None
    return HarnessError(
        f"the results store failed: {e}",
        hint="free space under the store (--db), or stop the other process that"
        " holds its write lock; then run the same command again to resume",
    )


def _refuse(path: Path, problem: str, hint: str | None = None) -> InputError:
    return InputError(
        f"{path}: {problem}",
        hint=hint or "pass --db with a crashlab results file, or move this file away",
    )


# --- the store ----------------------------------------------------------------------


def _check_readable(path: Path) -> None:
    """The file can be read. Never by opening it ourselves: closing any descriptor of a
    file drops every POSIX lock this process holds on it, including those of the SQLite
    connections a campaign keeps open while each run opens the store again -- and with
    them gone, another process's checkpoint reset the WAL under a live writer and
    corrupted a store (https://www.sqlite.org/howtocorrupt.html, section 2.2). SQLite
    itself reads the header (``_adopt``)."""
    if not os.access(path, os.R_OK):
        raise _refuse(path, "cannot read: permission denied")


def _adopt(path: Path, conn: sqlite3.Connection) -> None:
    """Check that the file is ours (or empty), migrate it, then switch on WAL."""
    try:
        # One read transaction: another process creating the store commits its tables and
        # its id together, and a reader between two statements would see tables without
        # the id (a store refused as not ours, seen under load).
        conn.execute("BEGIN")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        conn.execute("COMMIT")
        if app_id != APPLICATION_ID and (app_id != 0 or tables or version != 0):
            shown = ", ".join(sorted(tables)[:6]) or "none"
            raise _refuse(
                path,
                f"is an SQLite database but not a crashlab results file "
                f"(application_id {app_id:#x}, tables: {shown})",
            )
        if version > SCHEMA_VERSION:
            raise _refuse(
                path,
                f"was written by a newer crashlab (schema {version}, this one knows "
                f"up to {SCHEMA_VERSION})",
                hint="update crashlab, or pass --db with another file",
            )
        # WAL changes the file header, so it is switched on only once the file is ours.
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a lab about lost fsync'd data should not lose its own on a power cut; one
        # fsync per crash state costs nothing next to booting a guest.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        for target in range(version, SCHEMA_VERSION):
            _migrate(conn, target)
        _store_classes(conn)
        # A file with our id but without one of our tables was damaged by hand or by a
        # tool; do not guess how to repair it.
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if missing := _TABLES - tables:
            raise _refuse(
                path,
                f"crashlab results file is damaged: missing table(s) {', '.join(sorted(missing))}",
                hint="restore it from a backup, or pass --db with a new file",
            )
    except sqlite3.DatabaseError as e:
        if isinstance(e, sqlite3.OperationalError) and host_trouble(e):
            # The host's doing, not the file's: moving the store away would lose results.
            raise HarnessError(
                f"{path}: the results store failed: {e}",
                hint="free space under it, or stop the other process that holds its write"
                " lock; then run the same command again",
            ) from None
        if "file is not a database" in str(e):  # SQLite's own reading of the header
            raise _refuse(
                path, "is not an SQLite database (so not a crashlab results file)"
            ) from None
        raise _refuse(path, f"is not a usable SQLite database: {e}") from None


def _store_classes(conn: sqlite3.Connection) -> None:
    """Make ``outcome_classes`` say what harness/outcome.py says (migration 9): written on
    the first open and whenever the rules change, so no view restates them; otherwise a
    read of 18 rows."""
    want = sorted(outcome.classes())
    query = "SELECT outcome, expected, severity, counts_as FROM outcome_classes"
    if sorted(conn.execute(query)) == want:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM outcome_classes")
        conn.executemany("INSERT INTO outcome_classes VALUES (?, ?, ?, ?)", want)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection, current: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the lock.
        if conn.execute("PRAGMA user_version").fetchone()[0] != current:
            conn.execute("ROLLBACK")
            return
        for stmt in MIGRATIONS[current]:
            conn.execute(stmt)
        if current == 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {current + 1}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
