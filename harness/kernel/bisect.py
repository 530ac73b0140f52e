"""``scenario kernel bisect``: which Debian kernel package changed a run's verdict.

Given a good and a bad package of one series (``6.1.0-N-amd64``, or
``6.12.N+deb12-amd64`` from bookworm-backports) and a run whose scenario shows the
finding, the packages between them (what apt knows of that series) are booted by binary
search, each running the run's scenario; the first package whose verdict differs from
the good one's is named, with the lines of its Debian changelog (its own upload's
section) that touch the filesystem under test.
"""

from __future__ import annotations

import difflib
import gzip
import io
import re
import shutil
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import paths, proc
from harness.errors import InputError

# A series is the release with its moving number taken out: 6.1.0-54-amd64 -> 6.1.0-*-amd64.
_SERIES = (
    re.compile(r"^(6\.1\.0-)(\d+)(-amd64)$"),
    re.compile(r"^(6\.\d+\.)(\d+)(\+deb12-amd64)$"),
)
# Changelog entries that touch each filesystem (the driver that serves it, its journal).
FS_PREFIXES: dict[str, tuple[str, ...]] = {
    "ext2": ("ext4", "ext2"),
    "ext3": ("ext4", "jbd2"),
    "ext4": ("ext4", "jbd2"),
    "xfs": ("xfs",),
    "btrfs": ("btrfs",),
    "f2fs": ("f2fs",),
    "jfs": ("jfs",),
}


def series(release: str) -> tuple[re.Pattern[str], str, str]:
    """The pattern of ``release``'s series, its prefix and suffix.

    :raise InputError: not a Debian kernel release of a series the lab knows.
    """
    for pat in _SERIES:
        if m := pat.match(release):
            return pat, m.group(1), m.group(3)
    raise InputError(
        f"kernel {release!r}: not a Debian kernel release to bisect",
        hint="e.g. 6.1.0-54-amd64 or 6.12.74+deb12-amd64",
    )


def number(release: str) -> int:
    pat, _, _ = series(release)
    m = pat.match(release)
    assert m is not None
    return int(m.group(2))


def available(release: str) -> list[str]:
    """Every release of ``release``'s series that apt can download, oldest first."""
    pat, prefix, suffix = series(release)
    regex = "^linux-image-" + re.escape(prefix) + "[0-9]+" + re.escape(suffix) + "$"
    out = proc.run(["apt-cache", "search", "--names-only", regex]).stdout
    names = {line.split()[0].removeprefix("linux-image-") for line in out.splitlines() if line}
    return sorted((n for n in names if pat.match(n)), key=number)


def between(good: str, bad: str, known: Sequence[str]) -> list[str]:
    """The releases from ``good`` to ``bad`` (either may be the older), both included.

    :raise InputError: an endpoint apt does not have (with the closest names), or two
        series.
    """
    for name in (good, bad):
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            raise InputError(
                f"kernel package linux-image-{name}: apt has no such package",
                hint=("closest: " + ", ".join(close)) if close else "apt-cache search linux-image",
            )
    if series(good)[1:] != series(bad)[1:]:
        raise InputError(f"{good} and {bad} are not one series", hint="bisect within 6.1 or 6.12")
    lo, hi = sorted((number(good), number(bad)))
    span = [k for k in known if lo <= number(k) <= hi]
    return span if number(good) <= number(bad) else span[::-1]


@dataclass
class Bisection:
    """The search: each release booted and its verdict (True: the finding)."""

    releases: list[str]
    verdicts: dict[str, bool] = field(default_factory=dict)

    @property
    def first_changed(self) -> str | None:
        """The first release, walking from good to bad, whose verdict is the bad one's."""
        good = self.verdicts[self.releases[0]]
        for r in self.releases:
            if r in self.verdicts and self.verdicts[r] != good:
                return r
        return None


def bisect(releases: Sequence[str], verdict: Callable[[str], bool]) -> Bisection:
    """Binary search over ``releases`` (good first, bad last) for the first whose
    ``verdict`` differs from the first's. ``verdict`` runs a release (the endpoints too:
    a known run's may be answered without a boot).

    :raise InputError: the endpoints agree -- nothing to bisect.
    """
    b = Bisection(list(releases))
    lo, hi = 0, len(releases) - 1
    for i in (lo, hi):
        b.verdicts[releases[i]] = verdict(releases[i])
    if b.verdicts[releases[lo]] == b.verdicts[releases[hi]]:
        said = "shows the finding" if b.verdicts[releases[lo]] else "is clean"
        raise InputError(
            f"{releases[lo]} and {releases[hi]} agree: each {said}",
            hint="nothing changed between them; give a good and a bad package",
        )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        b.verdicts[releases[mid]] = verdict(releases[mid])
        if b.verdicts[releases[mid]] == b.verdicts[releases[lo]]:
            lo = mid
        else:
            hi = mid
    return b


def changelog(release: str) -> str:
    """The Debian changelog of ``linux-image-<release>`` (downloaded once, cached)."""
    cache = paths.cache_dir() / "changelogs" / f"{release}.txt"
    if cache.is_file():
        return cache.read_text()
    work = cache.parent / f"{release}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        proc.run(["apt-get", "download", f"linux-image-{release}"], cwd=work, timeout=1800)
        member = f"./usr/share/doc/linux-image-{release}/changelog.gz"
        text = gzip.decompress(deb_member(next(work.glob("*.deb")), member)).decode(
            "utf-8", "replace"
        )
        cache.write_text(text)
        return text
    finally:
        shutil.rmtree(work, ignore_errors=True)


def deb_member(deb: Path, member: str) -> bytes:
    """One file of a .deb's data, read in place (an ar archive holding data.tar.*):
    no extraction of a kernel's 400 MB of modules for its changelog."""
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise InputError(f"{deb}: not a Debian package")
        while header := f.read(60):
            name, size = header[:16].strip().decode(), int(header[48:58])
            if name.startswith("data.tar"):
                with tarfile.open(fileobj=io.BytesIO(f.read(size)), mode="r:*") as t:
                    got = t.extractfile(member)
                    if got is None:
                        raise InputError(f"{deb}: no {member}")
                    return got.read()
            f.seek(size + size % 2, 1)
    raise InputError(f"{deb}: no data archive")


_HEADER = re.compile(r"^linux(-signed-amd64)? \((?P<version>[^)]+)\) ")


def version(release: str) -> str:
    """The Debian version of ``linux-image-<release>`` (apt's newest)."""
    out = proc.run(["apt-cache", "show", f"linux-image-{release}"]).stdout
    return next(
        line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version:")
    )


def upload_section(text: str, previous_version: str) -> list[str]:
    """The lines of a package's changelog that came with it: from the top down to the
    first header of the previous package's upstream version (backports' changelogs put
    the rebuild's header above the source upload's: both belong to the previous one)."""
    lines = text.splitlines()
    prev = previous_version.split("-")[0]
    for i, line in enumerate(lines[1:], 1):
        if (m := _HEADER.match(line)) and m.group("version").split("-")[0] == prev:
            return lines[:i]
    return lines


def fs_lines(section: Sequence[str], fs: str) -> list[str]:
    """The entries of ``section`` about ``fs``, each on one line (wrapped lines joined)."""
    prefixes = tuple(f"- {p}" for p in FS_PREFIXES.get(fs, (fs,)))
    out: list[str] = []
    keep = False
    for line in section:
        text = line.strip()
        if text.startswith("- "):
            keep = text.startswith(prefixes)
            if keep:
                out.append(text)
        elif not text or text.startswith(("* ", "linux", "--")):
            keep = False
        elif keep:
            out[-1] += " " + text
    return out
