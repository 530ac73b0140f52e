"""Reading the guest console: a panic is found however the log arrives."""

from __future__ import annotations

from pathlib import Path

from harness.vm import console

PANIC = (Path(__file__).parent / "data" / "console" / "sysrq-panic.txt").read_bytes()


def test_a_recorded_panic_is_a_panic() -> None:
    found = console.scan(PANIC.decode())
    assert found is not None and found.trouble is console.Trouble.PANIC
    assert "sysrq triggered crash" in found.line


def test_a_panic_line_split_across_reads_is_still_found(tmp_path: Path) -> None:
    """The kernel prints a byte at a time under TCG: a look can land mid-line."""
    log = tmp_path / "console.log"
    cut = PANIC.index(b"not syncing")
    log.write_bytes(PANIC[:cut])
    reader = console.Reader(log)
    assert console.scan(reader.unseen()) is None
    log.write_bytes(PANIC)
    found = console.scan(reader.unseen())
    assert found is not None and found.trouble is console.Trouble.PANIC


def test_a_panic_above_a_long_trace_is_found_once_the_vm_is_gone(tmp_path: Path) -> None:
    """More trace than any fixed tail window: the first line is what names the panic."""
    log = tmp_path / "console.log"
    log.write_bytes(PANIC + b"[    7.0]  ? some_frame+0x1/0x2\n" * 200 + b"[    7.1] partial")
    reader = console.Reader(log)
    assert console.scan(console.tail(log)) is None  # why a tail is not enough
    found = console.scan(reader.unseen(final=True))
    assert found is not None and found.trouble is console.Trouble.PANIC
    assert reader.unseen(final=True) == ""
