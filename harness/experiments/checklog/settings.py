"""Check-log scenarios (``kind = "check-log"``): a dm-log-writes log recorded elsewhere --
fstests' generic/455, 457, 470, 482, QEMU's blklogwrites, hardware -- cut into crash states
and checked like the lab's own. ``scenario check-log LOG ...`` builds one from its flags;
a file of this kind works with ``scenario run`` too."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.crash import CheckSpec, CrashSpec, FsSpec, check_devices, check_recovery
from harness.config.settings import problem


class LogCheckScenario(ScenarioBase):
    """A log recorded elsewhere, its crash states checked (``kind = "check-log"``)."""

    kind: Literal["check-log"]
    log: Path = Field(description="the dm-log-writes log")
    # fs.disk_size is the recorded device's size: the log does not say it.
    fs: FsSpec
    after_mark: str | None = Field(
        None, description="states start after this mark, the log's own text (fstests: mkfs)"
    )
    after_entry: int | None = Field(None, ge=0, description="states start after this entry")
    oracle: Path | None = Field(
        None, description="an oracle of the lab's format; without one fsck and mount judge"
    )
    crash: CrashSpec = Field(default_factory=CrashSpec)
    check: CheckSpec = Field(default_factory=CheckSpec)

    @model_validator(mode="after")
    def _recovery_modes(self) -> LogCheckScenario:
        check_recovery(self.fs, self.check)
        check_devices(self.fs, self.crash, self.check, "check-log")
        return self

    @model_validator(mode="after")
    def _one_start(self) -> LogCheckScenario:
        # A file's relative paths are its folder's, as a user reading it expects.
        for key in ("log", "oracle"):
            value = getattr(self, key)
            if value is not None and not value.is_absolute() and self.path.suffix == ".toml":
                object.__setattr__(self, key, self.path.parent / value)
        if self.after_mark is not None and self.after_entry is not None:
            raise problem(
                "states start after a mark or after an entry, not both",
                "give one of after_mark, after_entry",
                key="after_entry",
            )
        return self

    def fs_types(self) -> tuple[str, ...]:
        return (str(self.fs.type),)

    def catalogue_row(self) -> tuple[str, str, str, str]:
        c = self.crash
        return (
            str(self.fs.type),
            str(self.fs.data_mode or "-"),
            f"log {self.log.name}",
            ", ".join(st.label() for st in c.states) + f" (<= {c.max_states})",
        )


SETTABLE = settings.settable(LogCheckScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
