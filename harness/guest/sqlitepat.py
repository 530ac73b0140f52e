#!/usr/bin/env python3
"""SQLite transactions under every journal mode and synchronous level, and what a crash
state left of each database (runs inside the guest; stdlib only; driven by apppat.py).

One database per (journal_mode, synchronous) case: DELETE / TRUNCATE / WAL x OFF / NORMAL
/ FULL / EXTRA. After the schema is made durable (sync, mark 1), transactions run round-robin over
the databases; each inserts row i and sets ``meta.last = i``. When COMMIT returns, a mark
is placed and the oracle notes, per database, the last transaction whose COMMIT returned.

``classify_dbs`` opens each database of a mounted crash state (SQLite's own recovery: hot
journal rollback, WAL replay) and says ``committed`` (every transaction that had returned
from COMMIT by the state's last mark is there), ``rolled-back`` (consistent, but an older
transaction is the last), ``corrupt`` (``PRAGMA integrity_check`` fails, the database
cannot be read, or a transaction is half there: ``meta.last`` disagrees with the rows) or
``missing``. What SQLite promises (https://www.sqlite.org/pragma.html#pragma_synchronous):
FULL and EXTRA -- no corruption; durable commits with EXTRA, and with FULL in TRUNCATE and
WAL mode (DELETE + FULL may roll back the last commit: EXTRA exists for that); WAL +
NORMAL -- no corruption, the last commits may roll back; the rest promise nothing across
a power loss. ``violated`` marks a state
that broke its database's promise: that is a finding.
"""

from __future__ import annotations

import os
import random
import sqlite3
from typing import Any

from ..model.oracle import AFTER_FINAL, MARK_PREFIX
from .opgen import emit_mark

JOURNAL_MODES = ("DELETE", "TRUNCATE", "WAL")
SYNCS = ("OFF", "NORMAL", "FULL", "EXTRA")


def db_name(mode: str, sync: str) -> str:
    return f"{mode.lower()}-{sync.lower()}.db"


def _mark(marks: list[dict[str, Any]], ops: int, committed: dict[str, int], mark_cmd: str,
          dm_name: str) -> str:  # fmt: skip
    text = f"{MARK_PREFIX}{len(marks) + 1}"
    emit_mark(mark_cmd, dm_name, text)
    empty: dict[str, Any] = {"files": {}, "absent": []}
    marks.append(
        {"mark": text, "n": len(marks) + 1, "after_op": ops, "committed": dict(committed),
         "dirs": [], "prefixes": {}, "either": {}, **empty, "exact": empty}
    )  # fmt: skip
    return text


def run_dbs(
    root: str, seed: int, transactions: int, size: int, mark_cmd: str, dm_name: str
) -> dict[str, Any]:
    """Run the transactions; the oracle body (opgen's shape, plus ``databases``)."""
    rng = random.Random(seed)
    cases = [(m, s) for m in JOURNAL_MODES for s in SYNCS]
    cons: dict[str, sqlite3.Connection] = {}
    log: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    committed = {db_name(m, s): 0 for m, s in cases}
    error = None
    final = None
    try:
        for mode, sync in cases:
            name = db_name(mode, sync)
            # isolation_level=None: BEGIN and COMMIT are ours, so "returned from COMMIT"
            # is exactly the statement's return.
            con = sqlite3.connect(os.path.join(root, name), isolation_level=None)
            got = con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
            if str(got).upper() != mode:
                raise sqlite3.OperationalError(f"{name}: journal_mode {mode} gave {got}")
            con.execute(f"PRAGMA synchronous={sync}")
            con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
            con.execute("CREATE TABLE meta (k INTEGER PRIMARY KEY, last INTEGER NOT NULL)")
            con.execute("INSERT INTO meta VALUES (0, 0)")
            cons[name] = con
        os.sync()
        _mark(marks, 0, committed, mark_cmd, dm_name)
        for i in range(1, transactions + 1):
            for name, con in cons.items():
                payload = rng.randbytes(rng.randint(max(1, size // 2), size))
                con.execute("BEGIN")
                con.execute("INSERT INTO t VALUES (?, ?)", (i, payload))
                con.execute("UPDATE meta SET last = ? WHERE k = 0", (i,))
                con.execute("COMMIT")
                committed[name] = i
                log.append({"i": len(log), "op": "commit", "path": name, "txn": i})
                log[-1]["mark"] = _mark(marks, len(log), committed, mark_cmd, dm_name)
        for con in cons.values():
            con.close()
        os.sync()
        final = _mark(marks, len(log), committed, mark_cmd, dm_name)
    except (sqlite3.Error, OSError) as e:
        error = f"{type(e).__name__}: {e}"
    databases = {db_name(m, s): {"journal_mode": m, "synchronous": s} for m, s in cases}
    return {"marks": marks, "final_mark": final, "ops": log, "complete": error is None,
            "error": error, "databases": databases}  # fmt: skip


def promise(journal_mode: str, synchronous: str) -> tuple[bool, bool]:
    """(commits durable, no corruption) as SQLite documents them. In DELETE mode a commit
    is the unlink of the journal, and only EXTRA syncs the directory after it: under
    FULL a crash may leave the journal, which the next open rolls back."""
    if synchronous == "EXTRA" or (synchronous == "FULL" and journal_mode != "DELETE"):
        return True, True
    return False, synchronous == "FULL" or (synchronous == "NORMAL" and journal_mode == "WAL")


def inspect(path: str) -> dict[str, Any]:
    """integrity_check, meta.last and whether the rows agree with it."""
    if not os.path.isfile(path):
        return {"class": "missing"}
    try:
        con = sqlite3.connect(path, isolation_level=None)
        try:
            check = [r[0] for r in con.execute("PRAGMA integrity_check")]
            last = con.execute("SELECT last FROM meta WHERE k = 0").fetchone()[0]
            ids = [r[0] for r in con.execute("SELECT id FROM t ORDER BY id")]
        finally:
            con.close()
    except sqlite3.Error as e:
        return {"class": "corrupt", "error": f"{type(e).__name__}: {e}"}
    ok = check == ["ok"] and ids == list(range(1, int(last) + 1))
    facts: dict[str, Any] = {"integrity": check[:3], "last": last, "rows": len(ids)}
    return {**facts, **({} if ok else {"class": "corrupt"})}


def classify_dbs(
    root: str, oracle: dict[str, Any], mark: str | None, exact: bool
) -> list[dict[str, Any]]:
    """Per database of a mounted state: its class and whether it broke a promise."""
    if mark in AFTER_FINAL:
        mark = oracle.get("final_mark")
    entry = next((m for m in oracle["marks"] if m["mark"] == mark), None)
    if entry is None:  # before the schema was durable: nothing has begun
        return []
    out = []
    for name, db in sorted(oracle["databases"].items()):
        want = int(entry["committed"][name])
        facts = inspect(os.path.join(root, name))
        if "class" not in facts:
            facts["class"] = "committed" if int(facts["last"]) >= want else "rolled-back"
        durable, intact = promise(db["journal_mode"], db["synchronous"])
        violated = (durable and facts["class"] != "committed") or (
            intact and facts["class"] in ("corrupt", "missing")
        )
        case = f"journal_mode={db['journal_mode']} synchronous={db['synchronous']}"
        out.append({"target": name, "case": case, "committed": want,
                    "promised": durable, "violated": violated, **facts})  # fmt: skip
    return out
