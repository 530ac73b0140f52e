"""The guest agent client against a peer that stops answering (what chaos.py's unplugged
virtio-serial port does to qemu-ga): the client must give up after REPLY_SECONDS, not
after the command's own timeout."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from harness.errors import GuestAgentError, GuestTimeout
from harness.vm import agent


def _silent_after_exec(path: Path) -> threading.Thread:
    """A qemu-ga stand-in on a unix socket: answers guest-exec with a pid, then nothing."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(1 << 16)
        conn.sendall(json.dumps({"return": {"pid": 7}}).encode() + b"\n")
        time.sleep(3)  # reads nothing more, answers nothing
        conn.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_an_agent_that_stops_answering_is_a_harness_error_within_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "REPLY_SECONDS", 0.5)
    sock = tmp_path / "ga.sock"
    _silent_after_exec(sock)
    a = agent.Agent(sock)
    a.connect()
    t0 = time.monotonic()
    with pytest.raises(GuestAgentError, match="stopped answering") as e:
        a.exec(["sleep", "100"], timeout=600)
    assert not isinstance(e.value, GuestTimeout)
    assert time.monotonic() - t0 < 2.5
    a.close()
