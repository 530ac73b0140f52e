"""Reading TOML into frozen types with errors that name the file, the key and the value.

Scenarios, campaigns and the image recipe all go through ``Table``: every key read is
checked for type, and keys nobody read are reported with the closest valid key, so a typo
never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import InputError

T = TypeVar("T")


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file's data.

    :raise InputError: missing, unreadable or not TOML, naming the file.
    """
    return load(path).data


def load(path: Path) -> Table:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(
            f"{path}: not valid TOML: {e}", hint="see https://toml.io for the syntax"
        ) from None
    return Table(path, data, prefix="")


class Table:
    """A TOML table that remembers which keys were read."""

    def __init__(self, path: Path, data: dict[str, Any], prefix: str):
        self.path = path
        self.data = data
        self.prefix = prefix
        self._read: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def error(self, name: str, value: Any, problem: str, hint: str | None = None) -> InputError:
        return InputError(f"{self.path}: key {self.key(name)!r} = {value!r}: {problem}", hint=hint)

    def has(self, name: str) -> bool:
        return name in self.data

    def get(
        self, name: str, kind: type[T], default: T | None = None, *, required: bool = False
    ) -> T:
        self._read.add(name)
        if name not in self.data:
            if required:
                raise InputError(f"{self.path}: missing required key {self.key(name)!r}")
            return default  # type: ignore[return-value]
        value = self.data[name]
        # TOML integers are acceptable where a float is wanted; bools are not ints here.
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(
                name, value, f"expected {_kind_name(kind)}, got {_kind_name(type(value))}"
            )
        return value

    def choice(self, name: str, choices: Sequence[str], default: str | None = None) -> str:
        value = self.get(name, str, default, required=default is None)
        if value not in choices:
            raise self.error(
                name, value, "not one of " + ", ".join(choices), hint=_closest(value, choices)
            )
        return value

    def str_list(self, name: str, default: Sequence[str] = ()) -> tuple[str, ...]:
        value = self.get(name, list, list(default))
        for item in value:
            if not isinstance(item, str):
                raise self.error(name, value, f"expected a list of strings, found {item!r}")
        return tuple(value)

    def convert(
        self, name: str, fn: Callable[[Any], T], default: Any = None, *, required: bool = False
    ) -> T:
        """Read a value and pass it through ``fn``; a ValueError from ``fn`` names the key."""
        self._read.add(name)
        if name not in self.data:
            if required:
                raise InputError(f"{self.path}: missing required key {self.key(name)!r}")
            value = default
        else:
            value = self.data[name]
        try:
            return fn(value)
        except (ValueError, TypeError) as e:
            raise self.error(name, value, str(e)) from None

    def table(self, name: str) -> Table:
        self._read.add(name)
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.error(name, value, "expected a table")
        return Table(self.path, value, prefix=f"{self.prefix}{name}.")

    def finish(self) -> None:
        """Reject keys that nothing read: a typo must not pass silently."""
        for name in self.data:
            if name not in self._read:
                known = sorted(self._read)
                raise InputError(
                    f"{self.path}: unknown key {self.key(name)!r}",
                    hint=_closest(name, known) or ("valid keys: " + ", ".join(known)),
                )


def _closest(value: str, choices: Sequence[str]) -> str | None:
    match = difflib.get_close_matches(str(value), list(choices), n=1)
    return f"did you mean {match[0]!r}?" if match else None


def closest_hint(value: str, choices: Sequence[str]) -> str | None:
    return _closest(value, choices)


def _kind_name(kind: type) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true/false",
        list: "a list",
        dict: "a table",
    }.get(kind, kind.__name__)


def parse_size(value: Any) -> int:
    """'256M', '1G', '4096', 4096 -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    if not isinstance(value, str):
        raise ValueError("expected a size such as '256M' or '1G'")
    s = value.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        n = float(s[:-1]) * units[s[-1]] if s and s[-1] in units else float(s)
    except ValueError:
        raise ValueError("expected a size such as '256M' or '1G'") from None
    if n <= 0:
        raise ValueError("a size must be positive")
    return int(n)
