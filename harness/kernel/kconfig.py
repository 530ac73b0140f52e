"""The lab's kernel config fragment (``images/kernel-fragment.config``) and what a merged
``.config`` must keep of it: pure functions over config text, for ``build.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import paths
from harness.errors import InputError
from harness.kernel.store import parse_config

# How the lab builds, beside what the guest needs: a build outside Debian's packaging has
# none of its signing keys (``MODULE_SIG_KEY="output/signing_key.pem"``,
# ``SYSTEM_TRUSTED_KEYS``); its lockdown LSM selects MODULE_SIG anyway, so the key is
# kbuild's default, a throwaway one it makes itself, and modules go unsigned (nothing
# forces signatures). No debug info saves most of the link time and the pahole (BTF)
# dependency. Merged before the fragment and not checked afterwards: a defconfig base
# has none of these options to begin with.
BUILD_ONLY = """\
# CONFIG_MODULE_SIG is not set
# CONFIG_MODULE_SIG_ALL is not set
CONFIG_MODULE_SIG_KEY="certs/signing_key.pem"
CONFIG_SYSTEM_TRUSTED_KEYS=""
CONFIG_SYSTEM_REVOCATION_KEYS=""
CONFIG_DEBUG_INFO_NONE=y
# CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT is not set
# CONFIG_DEBUG_INFO_DWARF4 is not set
# CONFIG_DEBUG_INFO_DWARF5 is not set
"""


def fragment_path() -> Path:
    return paths.recipe_dir() / "kernel-fragment.config"


def parse_fragment(text: str, where: Path | str = "fragment") -> dict[str, str | None]:
    """Option (without ``CONFIG_``) -> wanted value, None for ``# CONFIG_X is not set``.

    :raise InputError: a line that is neither a comment, blank, nor an option (line named).
    """
    out: dict[str, str | None] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("# CONFIG_") and line.endswith(" is not set"):
            out[line[len("# CONFIG_") : -len(" is not set")]] = None
        elif line.startswith("CONFIG_") and "=" in line:
            key, _, value = line.partition("=")
            out[key.removeprefix("CONFIG_")] = value.strip().strip('"')
        elif line and not line.startswith("#"):
            raise InputError(
                f"{where}:{n}: not a config line: {raw!r}",
                hint="CONFIG_X=y|m|value or '# CONFIG_X is not set'",
            )
    return out


@dataclass(frozen=True)
class Lost:
    """A fragment option the merged config does not have as asked."""

    option: str
    wanted: str | None
    got: str | None

    def __str__(self) -> str:
        def show(v: str | None) -> str:
            return "not set" if v is None else v

        return f"CONFIG_{self.option}={show(self.wanted)} (got {show(self.got)})"


def lost(fragment: dict[str, str | None], config_text: str) -> list[Lost]:
    """What of ``fragment`` did not survive into ``config_text`` (a ``.config`` after
    ``make olddefconfig``, which silently drops an option whose dependency is off).
    ``m`` is met by ``y``: a built-in option may select a module's code in."""
    have = parse_config(config_text)
    out = []
    for option, wanted in fragment.items():
        got = have.get(option)
        if got == wanted or (wanted == "m" and got == "y"):
            continue
        if wanted is None and got in (None, "n"):
            continue
        out.append(Lost(option, wanted, got))
    return out


def require_all(fragment_file: Path, config_file: Path) -> None:
    """:raise InputError: an option of ``fragment_file`` is not in ``config_file`` as
    asked (each named, with what it became)."""
    gone = lost(parse_fragment(fragment_file.read_text(), fragment_file), config_file.read_text())
    if gone:
        raise InputError(
            f"{fragment_file}: {len(gone)} option(s) did not survive make olddefconfig: "
            + ", ".join(map(str, gone)),
            hint=f"a dependency is off in the base config: look each up with make "
            f"O={config_file.parent} menuconfig (/ searches), or try --config-base defconfig",
        )
