"""The check of a mounted crash state against what its last mark requires."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any

from ..contract import Meta, Mismatch, NlinkMiss, Verdict
from .marks import AFTER_FINAL, FORMAT, profile_of


class UsageError(Exception):
    """Bad arguments or an unreadable oracle: exit 2."""


def load_oracle(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"--oracle {path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"--oracle {path}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"--oracle {path}: not a {FORMAT} file")
    return data


def file_digest(path: str, limit: int | None = None) -> tuple[str, int]:
    """sha256 and length of the file (of its first ``limit`` bytes)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20 if limit is None else min(1 << 20, limit - size)):
            h.update(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
    return h.hexdigest(), size


def user_xattrs(path: str) -> dict[str, str]:
    """A file's ``user.`` attributes, values in hex (what the oracle stores)."""
    names = sorted(n for n in os.listxattr(path) if n.startswith("user."))
    return {n: os.getxattr(path, n).hex() for n in names}


def _promise(
    oracle: dict[str, Any], req: dict[str, Any] | None, failed: set[str], exact: bool
) -> str | None:
    """Which promise a failed check broke: the weakest profile that required one of the
    failed names (``posix`` when POSIX alone did), else the run's own."""
    if not failed or req is None:
        return None
    profile = _profile(oracle)
    for weaker, floor in req.get("floors", {}).items():  # weakest first
        if failed & {*floor["names"], *(floor["exact"] if exact else [])}:
            return str(weaker)
    return profile


def _profile(oracle: dict[str, Any]) -> str:
    """The profile a run's oracle judges by (one written before profiles: its fsync_names)."""
    return str(oracle.get("profile", profile_of(bool(oracle.get("fsync_names", True)))))


def _meta_ok(st: os.stat_result, want: dict[str, Any]) -> bool:
    """Rule 13: the mode and owner a chmod / chown set, once durable."""
    if "mode" in want and stat.S_IMODE(st.st_mode) != want["mode"]:
        return False
    return "owner" not in want or [st.st_uid, st.st_gid] == want["owner"]


def requirements(oracle: dict[str, Any], mark: str | None, exact: bool) -> dict[str, Any] | None:
    """What a state whose last mark is ``mark`` must hold (None: nothing)."""
    if mark in AFTER_FINAL and oracle.get("final_mark"):
        mark, exact = oracle["final_mark"], True  # nothing happened after the final sync
    entry: dict[str, Any] | None = next((m for m in oracle["marks"] if m["mark"] == mark), None)
    if entry is None:
        return None
    if not exact:
        return entry
    more = entry["exact"]
    return {
        **entry,
        "files": {**entry["files"], **more["files"]},
        "absent": [*entry["absent"], *more["absent"]],
        "prefixes": {},
        "either": {},
    }


def verify(root: str, oracle: dict[str, Any], mark: str | None, exact: bool = False) -> Verdict:
    """Check what ``mark`` requires of the tree at ``root`` (the rules of the module
    docstring). OSError reading a required file is reported per file (unreadable data is
    lost data); the caller treats any other exception as the lab's own failure."""
    req = requirements(oracle, mark, exact)
    seen = _Seen(root)
    if req is not None:
        for d in req["dirs"]:
            seen.checked += 1
            if not os.path.isdir(os.path.join(root, d)):
                seen.missing.append(d + "/")
        for path, want in req["files"].items():
            seen.checked += 1
            seen.content(path, want)
        for path, want in req.get("prefixes", {}).items():
            seen.checked += 1
            seen.content(path, want, limit=want["size"])
        for path, shas in req.get("either", {}).items():
            seen.checked += 1
            seen.either(path, shas)
        for name in req.get("absent", []):
            seen.checked += 1
            if os.path.lexists(os.path.join(root, name)):
                seen.present.append(name)
    missing, mismatched, present, nlink = seen.missing, seen.mismatched, seen.present, seen.nlink
    failed = {*missing, *present, *(m.path for m in mismatched), *(n.path for n in nlink)}
    return Verdict(
        mark=mark,
        exact=exact,
        known=req is not None,
        profile=_profile(oracle),
        promise=_promise(oracle, req, failed, exact or mark in AFTER_FINAL),
        checked=seen.checked,
        missing=missing,
        mismatched=mismatched,
        present=present,
        nlink=nlink,
        ok=not (missing or mismatched or present or nlink),
    )


class _Seen:
    """What ``verify`` found under ``root`` so far, requirement by requirement."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.missing: list[str] = []
        self.mismatched: list[Mismatch] = []
        self.present: list[str] = []
        self.nlink: list[NlinkMiss] = []
        self.checked = 0

    def content(self, path: str, want: dict[str, Any], limit: int | None = None) -> None:
        """The file's bytes (its first ``limit``), size, link count, xattrs, mode and
        owner; a symbolic link's target."""
        full = os.path.join(self.root, path)
        if "symlink" in want:  # rule 13: the link itself, never what it points at
            self.link(path, full, want["symlink"])
            return
        if not os.path.isfile(full) or os.path.islink(full):
            self.missing.append(path)
            return
        try:
            got, size = file_digest(full, limit)
            st = os.stat(full)
        except OSError as e:
            self.mismatched.append(Mismatch(path=path, error=e.strerror))
            return
        if limit is not None and size < limit:
            self.mismatched.append(Mismatch(path=path, prefix=limit, size=size))
        elif got != want["sha256"] or (limit is None and st.st_size != want["size"]):
            self.mismatched.append(
                Mismatch(
                    path=path,
                    expected=want["sha256"],
                    got=got,
                    size=st.st_size,
                    expected_size=want["size"],
                )
            )
        elif limit is None:
            self.inode(path, full, st, want)

    def inode(self, path: str, full: str, st: os.stat_result, want: dict[str, Any]) -> None:
        """What the whole inode must hold beside the data: rules 7, 8 and 14."""
        if "nlink" in want and st.st_nlink != want["nlink"]:
            self.nlink.append(NlinkMiss(path=path, nlink=st.st_nlink, expected=want["nlink"]))
        elif "xattrs" in want and (got_x := user_xattrs(full)) != want["xattrs"]:
            self.mismatched.append(Mismatch(path=path, xattrs=got_x, expected=want["xattrs"]))
        elif not _meta_ok(st, want):
            got_m = Meta(mode=stat.S_IMODE(st.st_mode), owner=[st.st_uid, st.st_gid])
            self.mismatched.append(
                Mismatch(
                    path=path,
                    metadata=got_m,
                    expected_mode=want.get("mode"),
                    expected_owner=want.get("owner"),
                )
            )

    def link(self, path: str, full: str, target: str) -> None:
        if not os.path.islink(full):
            self.missing.append(path)
        elif (got := os.readlink(full)) != target:
            self.mismatched.append(Mismatch(path=path, symlink=got, expected=target))

    def either(self, path: str, shas: list[str]) -> None:
        """The file holds one of ``shas``: any of them is what the mark allows."""
        full = os.path.join(self.root, path)
        if not os.path.isfile(full):
            self.missing.append(path)
            return
        try:
            got, _ = file_digest(full)
        except OSError as e:
            self.mismatched.append(Mismatch(path=path, error=e.strerror))
            return
        if got not in shas:
            self.mismatched.append(Mismatch(path=path, either=shas, got=got))
