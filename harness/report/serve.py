"""``scenario results serve``: browse the store with datasette, on 127.0.0.1, read-only.

Datasette is given a *snapshot*, never the live file: the store is backed up with
SQLite's backup API into a temporary directory and opened there with ``-i`` (immutable).
Immutable mode cannot see pages still in the live file's WAL, and a campaign may be
writing while someone browses; a snapshot is consistent, cannot be written through, and
cannot hold a lock the campaign would wait for. The page says when it was taken.

The canned queries and the column descriptions below follow docs/results.md; a
researcher lands on the ``v_*`` views and the queries, not on the raw tables.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import shlex
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness import proc
from harness.errors import HarnessError, InputError
from harness.report.serve_meta import STATIC_MOUNT, STYLESHEET, metadata
from harness.store.db import Store
from harness.store.snapshot import snapshot

log = logging.getLogger("crashlab.serve")

HOST = "127.0.0.1"  # never configurable: the store holds host names and kernel logs
DEFAULT_PORT = 8001
STARTUP_TIMEOUT = 60.0


def check_port(port: int) -> int:
    """``port`` if it is free on 127.0.0.1, or a free one for 0.

    :raise InputError: out of range, in use, or not ours to bind.
    """
    if not 0 <= port <= 65535:
        raise InputError(f"bad port {port}: must be 1 to 65535 (0: any free port)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound: {e.strerror}"
            raise InputError(
                f"port {port} on {HOST} {why}", hint="pass another --port, or 0 for any free one"
            ) from None
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    db_name: str
    snapshot: Path
    argv: list[str]
    process: proc.Child


def require_datasette() -> None:
    """:raise HarnessError: datasette or its dashboards plugin (the charts) is missing."""
    for module in ("datasette", "datasette_dashboards"):
        if importlib.util.find_spec(module) is None:
            raise HarnessError(
                f"{module.replace('_', '-')} is not installed",
                hint="install the optional dependency: .venv/bin/pip install -e '.[serve]'",
            )


@contextmanager
def start_server(db: Path, port: int = DEFAULT_PORT) -> Iterator[Server]:
    """Snapshot ``db`` and serve it with datasette until the block ends.

    :raise InputError: bad store or port.
    :raise HarnessError: datasette is missing, or did not come up (its output attached).
    """
    require_datasette()
    port = check_port(port)
    with tempfile.TemporaryDirectory(prefix="crashlab-serve-") as tmp:
        d = Path(tmp)
        # One fixed name: it is the URL path (/lab/v_runs), whatever the file is called.
        db_name = "lab"
        snap = d / f"{db_name}.sqlite"
        snapshot(db, snap)
        taken = datetime.now(UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        meta = d / "metadata.json"
        # The store, not the snapshot: Store.open would switch the snapshot to WAL, which
        # immutable mode does not read whole. The queries only need its parameter names.
        with Store.open(db, create=False) as st:
            meta.write_text(json.dumps(metadata(db_name, db, taken, st), indent=2))
        static = d / "static"
        static.mkdir()
        (static / "serve.css").write_text(STYLESHEET)
        argv = [
            sys.executable,
            "-m",
            "datasette",
            "serve",
            "--immutable",
            str(snap),
            "--host",
            HOST,
            "--port",
            str(port),
            "--metadata",
            str(meta),
            "--static",
            f"{STATIC_MOUNT}:{static}",
            "--setting",
            "sql_time_limit_ms",
            "5000",
        ]
        out = d / "datasette.log"
        url = f"http://{HOST}:{port}/"
        with proc.spawn(argv, output=out, die_with_parent=True) as child:
            _wait_ready(child, url)
            yield Server(url, db_name, snap, argv, child)


def _wait_ready(child: proc.Child, url: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if not child.alive():
            raise HarnessError(
                f"datasette exited with status {child.returncode} before serving",
                detail="$ " + shlex.join(child.argv) + "\n" + child.read_output(),
            )
        try:
            with urllib.request.urlopen(url + "-/versions.json", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise HarnessError(
        f"datasette did not answer on {url} within {STARTUP_TIMEOUT:.0f} s",
        detail="$ " + shlex.join(child.argv) + "\n" + child.read_output(),
    )
