"""What a recovery run's numbers say: a linear fit of each recovery phase against size and
against inode count per cell (a line of the plot), and the seeds' claims put next to what
this run measured. Everything here is computed from stored observations; nothing is
asserted in code.

Seed 002 (IBM, 2004): ext2 needs a full fsck whose time grows with the filesystem; a
journaling filesystem replays its journal in seconds whatever the size. Seed 004 (NEC,
2010): ext4's ``uninit_bg``/``flex_bg`` make fsck much faster (the talk: 2-20x; 12 h vs
7 min at 16 TB).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# The phase that *is* the recovery of a filesystem: the kernel's replay at mount, or the
# full userspace repair for one without a journal.
PHASES = ("log_replay", "mount", "fsck", "repair")
PHASE_WORDS = {
    "log_replay": "log replay by its fsck, before mount",
    "mount": "mount (kernel replay)",
    "fsck": "read-only full check",
    "repair": "e2fsck -fy",
}


def _points(
    obs: Iterable[Mapping[str, Any]], phase: str
) -> dict[str, list[tuple[float, int, float]]]:
    """cell -> [(size GiB, inodes total, seconds)] for the items that have ``phase``."""
    out: dict[str, list[tuple[float, int, float]]] = {}
    for o in obs:
        s = o["metrics"].get("phases", {}).get(phase)
        if s is None:
            continue
        inodes = int(o["metrics"].get("population", {}).get("inodes_total") or 0)
        out.setdefault(o["cell"]["cell"], []).append((float(o["cell"]["size"]), inodes, float(s)))
    return out


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """(slope, R^2), or None when x does not vary."""
    if len(set(xs)) < 2:
        return None
    slope, _ = statistics.linear_regression(xs, ys)
    r2 = statistics.correlation(xs, ys) ** 2 if len(set(ys)) > 1 else 1.0
    return slope, r2


def fits(obs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and phase: seconds per GiB and per million inodes, each with its R^2."""
    out = []
    for phase in PHASES:
        for cell, pts in sorted(_points(obs, phase).items()):
            by_size = _fit([p[0] for p in pts], [p[2] for p in pts])
            if by_size is None:
                continue
            row: dict[str, Any] = {
                "cell": cell,
                "phase": phase,
                "n": len(pts),
                "s_per_gib": round(by_size[0], 5),
                "r2_size": round(by_size[1], 4),
            }
            with_inodes = [p for p in pts if p[1]]
            by_inodes = _fit([p[1] / 1e6 for p in with_inodes], [p[2] for p in with_inodes])
            if by_inodes is not None:
                row |= {
                    "s_per_minodes": round(by_inodes[0], 5),
                    "r2_inodes": round(by_inodes[1], 4),
                }
            out.append(row)
    return out


def _means(pts: Sequence[tuple[float, int, float]]) -> dict[float, float]:
    by: dict[float, list[float]] = {}
    for size, _, s in pts:
        by.setdefault(size, []).append(s)
    return {k: statistics.fmean(v) for k, v in sorted(by.items())}


def _gib(x: float) -> str:
    return f"{x:g}G" if x >= 1 else f"{x * 1024:g}M"


def _growth(cell: str, phase: str, means: Mapping[float, float]) -> str:
    sizes = list(means)
    lo, hi = sizes[0], sizes[-1]
    text = f"{cell}: {PHASE_WORDS[phase]} " + ", ".join(
        f"{means[s]:.3f} s at {_gib(s)}" for s in sizes
    )
    if hi > lo and means[lo] > 0:
        text += f" ({means[hi] / means[lo]:.1f}x for {hi / lo:g}x the size)"
    return text


def claims(obs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per seed claim this run's data covers: what was measured."""
    out: list[str] = []
    fs_of = {o["cell"]["cell"]: o["cell"]["fs"] for o in obs}
    feats = {o["cell"]["cell"]: o["cell"]["features"] for o in obs}
    method_of = {o["cell"]["cell"]: o["cell"].get("method", "sigkill") for o in obs}
    repair = _points(obs, "repair")
    mount = _points(obs, "mount")
    fsck = _points(obs, "fsck")
    for cell in sorted(c for c in repair if fs_of[c] == "ext2"):
        out.append(
            "seed 002, ext2 needs a full fsck growing with size: "
            + _growth(cell, "repair", _means(repair[cell]))
        )
    replay = _points(obs, "log_replay")  # JFS: its fsck replays the log, then the mount
    for cell in sorted(c for c in mount if fs_of[c] != "ext2" and "^has_journal" not in feats[c]):
        phase, pts = ("log_replay", replay[cell]) if cell in replay else ("mount", mount[cell])
        out.append(
            "seed 002, a journal replays in seconds whatever the size: "
            + _growth(cell, phase, _means(pts))
        )
    out += _feature_claims(fsck, fs_of, feats, method_of)
    return out


def _feature_claims(
    fsck: Mapping[str, list[tuple[float, int, float]]],
    fs_of: Mapping[str, str],
    feats: Mapping[str, str],
    method_of: Mapping[str, str],
) -> list[str]:
    """Seed 004: each ext4 feature set's full check against ext4 defaults crashed the
    same way, at the largest size both were measured at."""
    out = []
    for method in sorted({method_of[c] for c in fsck}):
        cells = [c for c in fsck if method_of[c] == method]
        base = next((c for c in cells if fs_of[c] == "ext4" and feats[c] == "defaults"), None)
        if base is not None:
            out += _against(fsck, base, [c for c in cells if fs_of[c] in ("ext3", "ext4")])
    return out


def _against(
    fsck: Mapping[str, list[tuple[float, int, float]]], base: str, cells: Sequence[str]
) -> list[str]:
    base_means = _means(fsck[base])
    out = []
    for cell in sorted(c for c in cells if c != base):
        means = _means(fsck[cell])
        common = sorted(set(means) & set(base_means))
        if not common or base_means[common[-1]] <= 0:
            continue
        at = common[-1]
        out.append(
            f"seed 004, uninit_bg/flex_bg make fsck faster: at {_gib(at)} the read-only full check"
            f" of {cell} took {means[at]:.3f} s, {means[at] / base_means[at]:.2f}x"
            f" {base} ({base_means[at]:.3f} s)"
        )
    return out
