"""A guest whose boot panics for the emulator's timing (TCG on a loaded host) is booted
once more; a panic of the kernel under test is not (harness/vm/guest.py ``boot``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.errors import GuestPanic
from harness.vm import guest as vmguest


class Fake:
    def __init__(self, panics: list[str]) -> None:
        self.panics = panics
        self.killed = self.shut = 0

    def kill(self) -> None:
        self.killed += 1

    def shutdown(self) -> None:
        self.shut += 1


def boots(tmp_path: Path, panics: list[str]) -> tuple[list[Fake], Any]:
    made: list[Fake] = []

    def make(where: Path) -> Any:
        made.append(Fake(panics))
        return made[-1]

    def launch(g: Any) -> None:
        if g.panics:
            raise GuestPanic(f"kernel panic: {g.panics.pop(0)}")

    return made, vmguest.boot(make, launch, tmp_path)


def test_an_emulator_timing_panic_at_boot_boots_once_more(tmp_path: Path) -> None:
    made, gen = boots(tmp_path, ["Kernel panic - not syncing: IO-APIC + timer doesn't work!"])
    guest = next(gen)
    assert len(made) == 2 and guest is made[1] and made[0].killed == 1


def test_a_panic_of_the_kernel_is_not_retried(tmp_path: Path) -> None:
    made, gen = boots(tmp_path, ["Kernel panic - not syncing: VFS: Unable to mount root fs"])
    with pytest.raises(GuestPanic, match="Unable to mount root"):
        next(gen)
    assert len(made) == 1


def test_a_second_timing_panic_is_the_labs_failure(tmp_path: Path) -> None:
    timer = "Kernel panic - not syncing: IO-APIC + timer doesn't work!"
    made, gen = boots(tmp_path, [timer, timer])
    with pytest.raises(GuestPanic, match="IO-APIC"):
        next(gen)
    assert len(made) == 2
