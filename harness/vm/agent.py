"""A client for qemu-guest-agent over a QEMU chardev unix socket.

Only the protocol: guest-sync-delimited, guest-exec/guest-exec-status and the guest-file-*
calls. Every call has a deadline; a guest that stops answering is a GuestTimeout, never a
command's failure.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import GuestAgentError, GuestTimeout

# qemu-ga answers guest-sync-delimited with this byte first, so a reader can skip stale
# replies left in the channel by an earlier client or an earlier boot.
_DELIMITER = b"\xff"
_CHUNK = 1 << 20
# A healthy agent answers guest-exec-status at once, whatever the command is doing. One
# that stays silent this long is gone (its port unplugged, the guest wedged): waiting out
# the command's own timeout (up to the check's 900 s) looked like a hang to chaos.py.
REPLY_SECONDS = 30.0


@dataclass(frozen=True)
class ExecResult:
    argv: list[str]
    exitcode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    signal: int | None = None

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.signal is None

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")


class Agent:
    # Bytes per guest-file-write / guest-file-read call.
    chunk = _CHUNK

    def __init__(self, path: Path):
        self.path = path
        self._sock: socket.socket | None = None
        self._buf = b""
        self._sync_id = int(time.time() * 1000) % 1_000_000_000

    # -- connection -------------------------------------------------------------------
    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.path))
        except OSError as e:
            s.close()
            raise GuestAgentError(f"guest agent: cannot connect to {self.path} ({e})") from None
        self._sock = s
        self._buf = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def sync(self, timeout: float) -> None:
        """Resynchronise the channel; raises GuestTimeout if the agent does not answer."""
        self._sync_id += 1
        sid = self._sync_id
        self._send({"execute": "guest-sync-delimited", "arguments": {"id": sid}}, delimit=True)
        deadline = time.monotonic() + timeout
        # Discard everything up to the delimiter, then replies until ours.
        while True:
            i = self._buf.find(_DELIMITER)
            if i >= 0:
                self._buf = self._buf[i + 1 :]
                break
            self._fill(deadline)
        while True:
            msg = self._read_message(deadline)
            if msg.get("return") == sid:
                return

    # -- calls --------------------------------------------------------------------------
    def call(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float = 30
    ) -> Any:
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self._send(msg)
        reply = self._read_message(time.monotonic() + timeout)
        if "error" in reply:
            err = reply["error"]
            raise GuestAgentError(f"guest agent: {command} failed: {err.get('desc', err)}")
        return reply.get("return")

    def exec(
        self,
        argv: list[str],
        *,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> ExecResult:
        args: dict[str, Any] = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if env:
            args["env"] = [f"{k}={v}" for k, v in env.items()]
        if input is not None:
            args["input-data"] = base64.b64encode(input).decode()
        start = time.monotonic()
        deadline = start + timeout
        pid = self.call("guest-exec", args, timeout=timeout)["pid"]
        delay = 0.002
        while True:
            left = max(1.0, deadline - time.monotonic())
            try:
                st = self.call("guest-exec-status", {"pid": pid}, timeout=min(left, REPLY_SECONDS))
            except GuestTimeout:
                if left <= REPLY_SECONDS:
                    raise
                raise GuestAgentError(
                    f"guest agent stopped answering ({REPLY_SECONDS:g} s without a reply)"
                    f" while running: {' '.join(argv)}"
                ) from None
            if st.get("exited"):
                break
            if time.monotonic() > deadline:
                raise GuestTimeout(
                    f"guest command did not finish within {timeout:g} s: {' '.join(argv)}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return ExecResult(
            argv=list(argv),
            exitcode=int(st.get("exitcode", -1)),
            stdout=base64.b64decode(st.get("out-data", "")),
            stderr=base64.b64decode(st.get("err-data", "")),
            seconds=time.monotonic() - start,
            signal=st.get("signal"),
        )

    def write_file(self, path: str, data: bytes, *, timeout: float = 120) -> None:
        handle = self.call("guest-file-open", {"path": path, "mode": "wb"}, timeout=timeout)
        try:
            for off in range(0, len(data), self.chunk):
                chunk = base64.b64encode(data[off : off + self.chunk]).decode()
                self.call("guest-file-write", {"handle": handle, "buf-b64": chunk}, timeout=timeout)
        finally:
            self.call("guest-file-close", {"handle": handle}, timeout=timeout)

    def read_file(self, path: str, *, timeout: float = 120) -> bytes:
        handle = self.call("guest-file-open", {"path": path, "mode": "rb"}, timeout=timeout)
        parts: list[bytes] = []
        try:
            while True:
                r = self.call(
                    "guest-file-read", {"handle": handle, "count": self.chunk}, timeout=timeout
                )
                parts.append(base64.b64decode(r.get("buf-b64", "")))
                if r.get("eof") or not r.get("count"):
                    break
        finally:
            self.call("guest-file-close", {"handle": handle}, timeout=timeout)
        return b"".join(parts)

    # -- wire ---------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any], *, delimit: bool = False) -> None:
        if self._sock is None:
            raise GuestAgentError("guest agent: not connected")
        data = json.dumps(msg).encode()
        try:
            self._sock.sendall((_DELIMITER if delimit else b"") + data)
        except OSError as e:
            raise GuestAgentError(f"guest agent: channel closed ({e})") from None

    def _fill(self, deadline: float) -> None:
        assert self._sock is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GuestTimeout("guest agent did not answer in time")
        self._sock.settimeout(remaining)
        try:
            data = self._sock.recv(1 << 16)
        except TimeoutError:
            raise GuestTimeout("guest agent did not answer in time") from None
        except OSError as e:
            raise GuestAgentError(f"guest agent: channel closed ({e})") from None
        if not data:
            raise GuestAgentError("guest agent: channel closed by QEMU")
        self._buf += data

    def _read_message(self, deadline: float) -> dict[str, Any]:
        dec = json.JSONDecoder()
        while True:
            text = self._buf.lstrip(b" \r\n\xff")
            if text:
                try:
                    obj, end = dec.raw_decode(text.decode(errors="replace"))
                except json.JSONDecodeError:
                    pass
                else:
                    # raw_decode indexes characters; replies are ASCII JSON, so bytes == chars.
                    self._buf = text[end:]
                    if isinstance(obj, dict):
                        return obj
                    continue
            self._fill(deadline)
