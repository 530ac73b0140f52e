"""``scenario lab soak CAMPAIGN``: the nightly left alone for a week, compressed (issue 48).

Night after night the campaign runs as the scheduled service runs it -- ``scenario
campaign run``, then ``campaign digest`` and ``lab prune --budget`` -- each a process of
its own, with faults at seeded moments between and during nights
(``soakfaults.py``): the harness killed with SIGKILL (and started again, as the next
timer or an operator would), the cache's filesystem filled, a Dask worker killed while
it runs a guest (that night runs on ``--dask local:2``), a kernel the archive does not
serve, a kept log corrupted, the clock moved two hours forward during a night and back
after it. Night 1 has no fault: it is the baseline. Every fault comes at least once
(round robin from night 2), more at random.

After each night (``soakcheck.py``): the store whole, the night's elements settled,
nothing counted twice, no earlier verdict lost or changed, the disk within the budget,
nothing left behind, and the harness's peak memory (flat across nights: the last night
within 25 % of the first or 64 MiB, whichever is more).

The cache is a tmpfs of ``--cache-size`` mounted for the soak with the current image
copied in: filling it fills nothing else, and the budget measures it alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness import paths, proc
from harness.campaign import soakcheck, soakfaults
from harness.image import build
from harness.store import prune

LAB = [sys.executable, "-m", "harness"]  # the lab's CLI, as the scheduled service runs it
FULL_SECONDS = 10  # how long the cache stays full: a guest's writes meet it (QEMU pauses)


@dataclass
class Night:
    n: int
    faults: list[str]
    did: list[str] = field(default_factory=list)  # what each fault did, as it happened
    starts: int = 0  # campaign starts: a kill makes one more
    statuses: list[int] = field(default_factory=list)
    seconds: float = 0.0
    elements: dict[str, int] = field(default_factory=dict)
    verdicts: int = 0
    twice: int = 0
    lost: int = 0
    integrity: str = ""
    disk_before: int = 0  # bytes before the night's prune: what it left without a budget
    disk: int = 0
    peak_rss: int = 0  # bytes, the campaign process's
    left: list[str] = field(default_factory=list)
    digest: int | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Soak:
    campaign: Path
    nights: int
    faults: list[str]
    budget: int
    db: Path
    work: Path  # the soak's folder: cache mount, night logs, the night's campaign file
    seed: int = 1
    cache_size: str = "8G"
    night_timeout: float = 3600.0
    extra: float = 0.25  # each fault's chance on a night beyond its own (plan)

    @property
    def cache(self) -> Path:
        return self.work / "cache"

    def env(self) -> dict[str, str]:
        return {**os.environ, "CRASHLAB_CACHE": str(self.cache), prune.BUDGET_ENV: str(self.budget)}


def plan(nights: int, faults: list[str], seed: int, extra: float = 0.25) -> list[list[str]]:
    """The faults of each night: none on the first; every fault once, in turn, from the
    second; then each other fault on a night with probability ``extra`` (seeded)."""
    rng = random.Random(seed)
    out: list[list[str]] = [[] for _ in range(nights)]
    for i, f in enumerate(faults):
        out[1 + i % max(1, nights - 1)].append(f)
    for night in out[1:]:
        night += [f for f in faults if f not in night and rng.random() < extra]
    return out


@contextlib.contextmanager
def cache_fs(s: Soak) -> Iterator[Path]:
    """A tmpfs for the soak's cache, the current image copied in; unmounted after."""
    s.cache.mkdir(parents=True, exist_ok=True)
    proc.run(["mount", "-t", "tmpfs", "-o", f"size={s.cache_size}", "crashlab-soak", s.cache])
    try:
        img = build.require_image()
        dest = s.cache / "images" / img.hash
        shutil.copytree(img.dir, dest)
        for name in ("bin", "content-hash", "accel.json"):
            src = paths.cache_dir() / name
            if src.is_dir():
                shutil.copytree(src, s.cache / name)
            elif src.is_file():
                shutil.copy2(src, s.cache / name)
        yield s.cache
    finally:
        proc.run(["umount", "-l", s.cache], check=False)


def run(s: Soak, on_night: Any = None) -> list[Night]:
    """Every night of the soak, each reported to ``on_night`` as it ends."""
    out: list[Night] = []
    seen: dict[str, str] = {}
    with cache_fs(s):
        for n, faults in enumerate(plan(s.nights, s.faults, s.seed, s.extra), 1):
            night = _night(s, n, faults, seen, out[0].seconds if out else 0.0)
            seen = soakcheck.Store(s.db).verdicts()
            out.append(night)
            if on_night is not None:
                on_night(night)
    _flat(out)
    return out


def _flat(nights: list[Night]) -> None:
    first, last = nights[0].peak_rss, nights[-1].peak_rss
    if last > max(first * 1.25, first + (64 << 20)):
        nights[-1].problems.append(f"memory grew: {first >> 20} MiB on night 1, {last >> 20} now")


def _night(s: Soak, n: int, faults: list[str], seen: dict[str, str], expect: float) -> Night:
    night = Night(n, faults)
    rng = random.Random(f"{s.seed}:{n}")
    text = s.campaign.read_text()
    if "corrupt-log" in faults:
        night.did.append(
            soakfaults.corrupt_kept_log(s.cache / "work" / "runs", rng) or "no kept log yet"
        )
    if "kernel-gone" in faults:
        first = str(tomllib.loads(text)["run"][0]["scenario"])
        text = soakfaults.gone_element(text, first)
        night.did.append(f"an element on {soakfaults.GONE_KERNEL}, a kernel no archive serves")
    campaign = s.work / f"{s.campaign.stem}.toml"  # one name: every night is the same campaign
    campaign.write_text(text)
    start = time.monotonic()
    moved = 0
    for _ in range(6):  # a kill makes one more start; the sixth would be a hang of ours
        fired, moved = _attempt(s, n, night, campaign, faults, rng, expect or 60.0, moved)
        if not fired.get("kill"):
            break
        faults = [f for f in faults if f != "kill"]  # a killed night is resumed whole
    if moved:
        night.did.append(soakfaults.jump_clock(-moved))
    night.seconds = time.monotonic() - start
    _after(s, night, campaign, seen)
    return night


def _attempt(
    s: Soak, n: int, night: Night, campaign: Path, faults: list[str], rng: random.Random,
    expect: float, moved: int,
) -> tuple[dict[str, bool], int]:  # fmt: skip
    dask = ["--dask", "local:2"] if "dask-worker" in faults else []
    argv = [
        *LAB,
        "campaign",
        "run",
        str(campaign),
        "--db",
        str(s.db),
        *dask,
    ]
    log = (s.work / f"night-{n}.log").open("a")
    p = subprocess.Popen(
        argv, cwd=paths.REPO, env=s.env(), stdout=log, stderr=log, start_new_session=True
    )
    night.starts += 1
    fired: dict[str, bool] = {}
    peak = [0]
    sampler = threading.Thread(target=_sample, args=(p, peak), daemon=True)
    sampler.start()
    timers = [
        threading.Timer(at, _fire, (s, p, f, night, fired))
        for at, f in soakfaults.moments(rng, faults, expect)
    ]
    for t in timers:
        t.start()
    try:
        rc = p.wait(timeout=s.night_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        rc = p.wait()
        night.problems.append(f"night {n} ran past {s.night_timeout:.0f} s: a hang")
    for t in timers:
        t.cancel()
    sampler.join(timeout=5)
    ballast = s.cache / soakfaults.BALLAST
    ballast.unlink(missing_ok=True)
    night.peak_rss = max(night.peak_rss, peak[0])
    night.statuses.append(rc)
    log.close()
    return fired, moved + (soakfaults.CLOCK_JUMP if fired.get("clock") else 0)


def _fire(
    s: Soak, p: subprocess.Popen[bytes], fault: str, night: Night, fired: dict[str, bool]
) -> None:
    if p.poll() is not None:
        night.did.append(f"{fault}: the night had ended before its moment")
        return
    if fault == "kill":
        night.did.append(soakfaults.kill_harness(p.pid))
    elif fault == "full-cache":
        night.did.append(f"filled {soakfaults.fill(s.cache)} for {FULL_SECONDS} s")
        time.sleep(FULL_SECONDS)
        (s.cache / soakfaults.BALLAST).unlink(missing_ok=True)
    elif fault == "dask-worker":
        for _ in range(120):
            if (said := soakfaults.kill_busy_worker(p.pid)) or p.poll() is not None:
                night.did.append(
                    said or "dask-worker: no worker ran a guest before the night ended"
                )
                break
            time.sleep(1)
    elif fault == "clock":
        night.did.append(soakfaults.jump_clock(soakfaults.CLOCK_JUMP))
    fired[fault] = True


def _sample(p: subprocess.Popen[bytes], peak: list[int]) -> None:
    """The campaign process's resident memory, once a second, its highest kept."""
    with contextlib.suppress(psutil.Error):
        me = psutil.Process(p.pid)
        while p.poll() is None:
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(1)


def _after(s: Soak, night: Night, campaign: Path, seen: dict[str, str]) -> None:
    """The service's ExecStopPost (digest, prune), then the checks."""
    env = s.env()
    digest = [
        *LAB,
        "campaign",
        "digest",
        str(campaign),
        "--db",
        str(s.db),
    ]
    night.digest = subprocess.run(digest, cwd=paths.REPO, env=env, capture_output=True).returncode
    with _env(env):
        night.disk_before = sum(prune.usage().values())
    pr = [*LAB, "lab", "prune", "--db", str(s.db)]
    subprocess.run(pr, cwd=paths.REPO, env=env, capture_output=True)
    st = soakcheck.Store(s.db, night.problems)
    night.integrity = st.integrity()
    if (cid := st.last_campaign(campaign.stem)) is not None:
        night.elements = st.elements(cid)
        night.twice = st.twice(cid)
    now = st.verdicts()
    night.verdicts = len(now)
    night.lost = st.kept(seen, now)
    with _env(env):
        night.disk = sum(prune.usage().values())
    if night.disk > s.budget:
        night.problems.append(
            f"disk {prune.human(night.disk)} over the {prune.human(s.budget)} budget"
        )
    night.left = soakcheck.left_behind(s.cache)
    if night.left:
        night.problems.append(f"left behind: {night.left}")


@contextlib.contextmanager
def _env(env: dict[str, str]) -> Iterator[None]:
    old = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)
