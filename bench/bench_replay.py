"""Crash states checked per second: crashlab against fstests' replay-log, on a real log.

    python3 bench/bench_replay.py LOG [--size 256M] [--peer /tmp/peer/replay-log]
        [--modes peer,crashlab,parallel,floor] [--workers 2] [--max-states N]

The states are generic/482's: one after every FUA that follows the ``crashlab:mkfs`` mark
(``faults.crashstates.at_fuas``). Every mode runs the same checker on the same states —
ext4 journal replay in userspace (``e2fsck -E journal_only``), then ``e2fsck -fn`` — and
they must agree on every verdict:

peer
    generic/482 on an image file: for each state, zero the image, ``replay-log --log LOG
    --replay IMG --limit N`` (entries 0..N-1, what ``_log_writes_replay_log_range`` does),
    then the checker. No undo: the next state starts from a zeroed image anyway.
peer-check
    replay-log's own single pass, ``--check fua --fsck CMD``, with the journal replay
    undone by CMD (e2fsck -z + e2undo) so the pass can go on. Not what generic/482 does
    (it mounts, which cannot be undone), but the best the peer tool can do.
crashlab
    one ``Replayer.walk`` over the states and ``check.host_check`` on each: every log
    entry applied once, the journal replay undone with e2undo.
parallel
    ``--workers`` processes, each with its own Replayer and image, each taking every
    ``workers``-th state in replay order (``--split interleave``: balanced, since the
    check cost grows with the filesystem, at the price of each worker applying the whole
    log once) or a contiguous share (``--split halves``).
floor
    the checker alone, on images materialised beforehand (untimed, in batches): journal
    replay without undo, then ``e2fsck -fn``; with 1 and with ``--workers`` concurrent
    checks. The time crashlab spends beyond this is the cost of replay and undo.

Give the device size with ``--size`` or keep the ``recording.json`` that ``scenario
record`` writes beside the log. The page cache is warm for every mode (the log is read
once first): we compare replay strategies, not the disk.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import tools
from harness.check import host as check
from harness.config.settings import parse_size
from harness.outcome import Outcome
from harness.record.logwrites import FUA, open_log
from harness.replay.crashstates import CrashState, at_fuas
from harness.replay.replayer import Replayer, replay_order

MODES = ("peer", "peer-check", "crashlab", "parallel", "floor")


@dataclass
class Timing:
    """One mode's run: wall time and, per state, what it spent where."""

    name: str
    states: int = 0
    wall: float = 0.0
    cpu: float = 0.0  # user + system seconds of this process and every child it reaped
    replay: list[float] = field(default_factory=list)  # materialising the state
    check: list[float] = field(default_factory=list)  # the checker, undo included
    undo: list[float] = field(default_factory=list)  # putting the image back, if measured
    verdicts: dict[int, bool] = field(default_factory=dict)  # prefix -> consistent

    @property
    def rate(self) -> float:
        return self.states / self.wall if self.wall else 0.0

    @property
    def cpu_rate(self) -> float:
        """States per CPU second: what a quiet machine's cores would see, near enough,
        when other guests take the CPUs (on a tmpfs, where nothing waits for a disk)."""
        return self.states / self.cpu if self.cpu else 0.0

    def line(self) -> str:
        def ms(xs: list[float]) -> str:
            if not xs:
                return "            -"
            return f"{statistics.fmean(xs) * 1000:6.1f}/{statistics.median(xs) * 1000:<6.1f}"

        return (
            f"{self.name:<22} {self.states:6d} {self.wall:9.2f} {self.rate:9.2f} "
            f"{self.cpu:8.2f} {self.cpu_rate:8.1f}  "
            f"{ms(self.replay)} {ms(self.check)} {ms(self.undo)}"
        )


def run(argv: Sequence[str | Path]) -> tuple[int, float]:
    """Run a tool quietly; its exit status and seconds. (Not proc.run: its logging and
    result record are part of no mode's cost but crashlab's, which uses it as shipped.)"""
    t = time.perf_counter()
    r = subprocess.run([str(a) for a in argv], capture_output=True, check=False)
    return r.returncode, time.perf_counter() - t


def e2fsck() -> str:
    return tools.require("e2fsck")


def floor_check(image: Path) -> tuple[bool, float]:
    """The checker without undo: journal replay, then a read-only full check."""
    t = time.perf_counter()
    rc, _ = run([e2fsck(), "-E", "journal_only", "-y", image])
    ok = False
    if rc < 8:
        rc, _ = run([e2fsck(), "-f", "-n", image])
        ok = rc == 0
    return ok, time.perf_counter() - t


def zero(image: Path, size: int) -> None:
    with image.open("r+b" if image.exists() else "wb") as f:
        f.truncate(0)
        f.truncate(size)


# -- the modes --------------------------------------------------------------------------


def bench_peer(peer: Path, log: Path, states: list[CrashState], size: int, d: Path) -> Timing:
    tm = Timing("peer (generic/482)")
    img = d / "peer.img"
    start = time.perf_counter()
    for s in states:
        t = time.perf_counter()
        zero(img, size)
        rc, _ = run([peer, "--log", log, "--replay", img, "--limit", str(s.prefix)])
        if rc:
            raise SystemExit(f"replay-log failed (exit {rc}) replaying {s.prefix} entries")
        tm.replay.append(time.perf_counter() - t)
        ok, secs = floor_check(img)
        tm.check.append(secs)
        tm.verdicts[s.prefix] = ok
    tm.wall = time.perf_counter() - start
    tm.states = len(states)
    img.unlink(missing_ok=True)
    return tm


PEER_FSCK = """#!/bin/sh
# Called by replay-log at every FUA: count, skip states before the mkfs mark, check, undo.
n=$(( $(cat "$D/n") + 1 )); echo $n > "$D/n"
[ $n -le {skip} ] && exit 0
rm -f "$D/undo"
{e2fsck} -E journal_only -y -z "$D/undo" "$IMG" >/dev/null 2>&1
{e2fsck} -f -n "$IMG" >/dev/null 2>&1; echo "$n $?" >> "$D/verdicts"
[ -s "$D/undo" ] && {e2undo} "$D/undo" "$IMG" >/dev/null 2>&1
exit 0
"""


def bench_peer_check(
    peer: Path, log: Path, states: list[CrashState], fuas_before: int, size: int, d: Path
) -> Timing:
    tm = Timing("peer --check fua")
    img = d / "peer.img"
    script = d / "fsck.sh"
    script.write_text(
        PEER_FSCK.format(skip=fuas_before, e2fsck=e2fsck(), e2undo=tools.require("e2undo"))
    )
    script.chmod(0o755)
    (d / "n").write_text("0\n")
    (d / "verdicts").write_text("")
    zero(img, size)
    env = {**os.environ, "D": str(d), "IMG": str(img)}
    argv = [peer, "--log", log, "--replay", img, "--check", "fua", "--fsck", script]
    argv += ["--limit", str(states[-1].prefix)]
    start = time.perf_counter()
    r = subprocess.run([str(a) for a in argv], env=env, capture_output=True, check=False)
    tm.wall = time.perf_counter() - start
    if r.returncode:
        raise SystemExit(f"replay-log --check fua failed: {r.stderr.decode()[-500:]}")
    rows = [line.split() for line in (d / "verdicts").read_text().splitlines()]
    for s, (_, rc) in zip(states, rows, strict=False):
        tm.verdicts[s.prefix] = rc == "0"
    tm.states = len(rows)
    img.unlink(missing_ok=True)
    return tm


def walk_and_check(
    log_path: Path, prefixes: list[int], size: int, d: Path, name: str, log_hash: str = ""
) -> Timing:
    """crashlab's way on the states with these prefixes (also a worker's whole job)."""
    tm = Timing(name)
    d.mkdir(parents=True, exist_ok=True)
    with open_log(log_path) as lg:
        if log_hash:
            # The parent hashed the log already: 1.3 s of sha256 per worker on 635 MB.
            lg.__dict__["hash"] = log_hash
        want = set(prefixes)
        states = [s for s in at_fuas(lg) if s.prefix in want]
        scratch = d / "scratch"
        with Replayer(lg, d / "work.img", size) as rp:
            # Up to the first state, untimed (as the floor's images are): with --from the
            # states start in the middle of the log.
            rp.advance(min((s.first_divergent for s in states), default=0))
            start, cpu = time.perf_counter(), cpu_seconds()
            mark = start
            for s in rp.walk(states):
                t = time.perf_counter()
                tm.replay.append(t - mark)  # goto, and the previous state's restore
                r = check.host_check("ext4", rp.image, scratch, changes=rp.changes())
                mark = time.perf_counter()
                tm.check.append(mark - t)
                tm.undo.append(mark - t - sum(r.phases.values()))  # e2undo and bookkeeping
                tm.verdicts[s.prefix] = r.outcome is Outcome.CONSISTENT
        tm.wall = time.perf_counter() - start
        tm.cpu = cpu_seconds() - cpu
        tm.states = len(states)
    (d / "work.img").unlink(missing_ok=True)
    return tm


def bench_parallel(
    log: Path, states: list[CrashState], size: int, d: Path, workers: int, split: str
) -> Timing:
    ordered = [s.prefix for s in replay_order(states)]
    if split == "interleave":
        shares = [ordered[w::workers] for w in range(workers)]
    else:
        k = -(-len(ordered) // workers)
        shares = [ordered[w * k : (w + 1) * k] for w in range(workers)]
    tm = Timing(f"crashlab x{workers} ({split})")
    start = time.perf_counter()
    # fork: a spawned worker re-imports the harness, ~1 s under load on this machine. The
    # parent holds no threads and no open log here; each worker opens its own.
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        futures = [
            ex.submit(walk_and_check, log, share, size, d / f"w{w}", f"w{w}", states[0].log_hash)
            for w, share in enumerate(shares)
        ]
        parts = [f.result() for f in futures]
    tm.wall = time.perf_counter() - start
    for p in parts:
        tm.states += p.states
        tm.replay += p.replay
        tm.check += p.check
        tm.undo += p.undo
        tm.verdicts.update(p.verdicts)
        print(f"  worker {p.name}: {p.states} states in {p.wall:.2f} s", file=sys.stderr)
    return tm


def bench_floor(
    log: Path, states: list[CrashState], size: int, d: Path, workers: int, batch: int = 32
) -> Timing:
    tm = Timing(f"floor x{workers}")
    with open_log(log) as lg, Replayer(lg, d / "floor-src.img", size) as rp:
        it = iter(rp.walk(states))
        done = False
        while not done:
            images: list[tuple[int, Path]] = []
            for s in it:  # materialise a batch, untimed
                img = d / f"floor-{s.prefix}.img"
                check.copy_image(rp.image, img)
                images.append((s.prefix, img))
                if len(images) == batch:
                    break
            else:
                done = True
            for _, img in images:  # written back, untimed: e2fsck fsyncs the image
                fd = os.open(img, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            t, cpu = time.perf_counter(), cpu_seconds()
            with ThreadPoolExecutor(workers) as ex:
                results = list(ex.map(lambda pi: floor_check(pi[1]), images))
            tm.wall += time.perf_counter() - t
            tm.cpu += cpu_seconds() - cpu
            for (prefix, img), (ok, secs) in zip(images, results, strict=True):
                tm.verdicts[prefix] = ok
                tm.check.append(secs)
                img.unlink()
    tm.states = len(tm.verdicts)
    (d / "floor-src.img").unlink(missing_ok=True)
    return tm


def verify_dut(log_path: Path, dut: Path, size: int, d: Path, peer: Path | None) -> None:
    """Replaying every entry onto a zeroed image must give the recorder's final disk."""
    img = d / "full.img"
    with open_log(log_path) as lg:
        n = len(lg.entries)
        with Replayer(lg, img, size) as rp:
            rp.advance(n)
        where = first_difference(img, dut)
        if where is None:
            print(f"verify: all {n} entries replayed == {dut.name}, byte for byte")
        else:
            last = [
                e.index for e in lg.entries if e.length and e.offset <= where < e.offset + e.length
            ]
            print(
                f"VERIFY FAILED: replayed image differs from {dut} at byte {where}; "
                f"entries covering it: {last[-5:]}"
            )
    if peer is not None and peer.exists():
        zero(img, size)
        run([peer, "--log", log_path, "--replay", img])
        where = first_difference(img, dut)
        print(f"verify: replay-log, all entries: {'identical' if where is None else where}")
    img.unlink(missing_ok=True)


def first_difference(a: Path, b: Path, chunk: int = 1 << 20) -> int | None:
    with a.open("rb") as fa, b.open("rb") as fb:
        pos = 0
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                k = next(
                    (i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y))
                )
                return pos + k
            if not x:
                return None
            pos += len(x)


# -- main --------------------------------------------------------------------------------


def parse_vs_read(log: Path, runs: int = 5) -> None:
    """Log parse throughput against a plain sequential read (bench_parse.py's measure, on
    this real log), warm in the page cache, best of ``runs``."""

    def read() -> None:
        with log.open("rb", buffering=0) as f:
            buf = bytearray(1 << 20)
            while f.readinto(buf):
                pass

    def parse() -> None:
        with open_log(log):
            pass

    def best(fn: Callable[[], None]) -> float:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    read()
    t_read, t_parse = best(read), best(parse)
    mb = log.stat().st_size / 1e6
    print(
        f"parse: read {t_read * 1000:.1f} ms ({mb / t_read:.0f} MB/s), open_log "
        f"{t_parse * 1000:.1f} ms ({mb / t_parse:.0f} MB/s): parse/read throughput "
        f"{t_read / t_parse:.2f} (goal >= 0.5)"
    )


def cpu_seconds() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(step: Callable[[], Timing]) -> Timing:
    before = cpu_seconds()
    tm = step()
    if not tm.cpu:  # the floor times its checks only, not the materialising
        tm.cpu = cpu_seconds() - before
    return tm


def device_size(log: Path, given: str | None) -> int:
    if given:
        return parse_size(given)
    meta = log.parent / "recording.json"
    if meta.exists():
        return int(json.loads(meta.read_text())["device_size"])
    raise SystemExit(f"give --size: no {meta} to read the device size from")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--size", help="device size, e.g. 256M (default: recording.json)")
    ap.add_argument("--peer", type=Path, default=Path("/tmp/peer/replay-log"))
    ap.add_argument("--modes", default="peer,crashlab,parallel,floor")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--split", choices=("interleave", "halves"), default="interleave")
    ap.add_argument("--max-states", type=int, help="only the first N states (quick runs)")
    ap.add_argument(
        "--from",
        dest="start",
        type=float,
        default=0.0,
        help="start at this fraction of the states (0.5: the middle; with --every 1 "
        "--max-states N, N consecutive states where the journal is in full use)",
    )
    ap.add_argument(
        "--every", type=int, default=1, help="every K-th state only: a sample spread over the log"
    )
    ap.add_argument(
        "--peer-every",
        type=int,
        default=1,
        help="the peer on every K-th of those states (it is quadratic; its rate is the sample's)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="N rounds, each mode once a round; each mode's best, and the ratios round by round",
    )
    ap.add_argument("--floor-batch", type=int, default=32, help="images materialised at a time")
    ap.add_argument("--scratch", type=Path, help="directory for images (default: a tmpdir)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if bad := [m for m in modes if m not in MODES]:
        raise SystemExit(f"unknown mode(s) {bad}; choose from {', '.join(MODES)}")
    size = device_size(args.log, args.size)
    with open_log(args.log) as lg:
        st = lg.stats()
        t = time.perf_counter()
        states = at_fuas(lg)
        t_gen = time.perf_counter() - t
        fuas_before = sum(1 for i in lg.having(FUA) if i + 1 < states[0].prefix) if states else 0
    all_states = states
    states = states[int(len(states) * args.start) :: args.every]
    if args.max_states:
        states = states[: args.max_states]
    print(
        f"log {args.log}: {lg.size / 1e6:.1f} MB, {st.entries} entries, {st.flushes} FLUSH, "
        f"{st.fuas} FUA, {st.discards} DISCARD; device {size >> 20} MiB; "
        f"{len(states)} states (FUA after mkfs; generated in {t_gen * 1000:.0f} ms)"
    )
    parse_vs_read(args.log)  # also warms the page cache for every mode alike
    results: dict[str, Timing] = {}
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        d = Path(tmp)
        dut = args.log.parent / "dut.raw"
        if dut.exists():
            verify_dut(args.log, dut, size, d, args.peer)
        steps: dict[str, Callable[[], Timing]] = {
            "peer": lambda: bench_peer(args.peer, args.log, states[:: args.peer_every], size, d),
            "peer-check": lambda: bench_peer_check(  # one pass: every state up to the last
                args.peer,
                args.log,
                [s for s in all_states if s.prefix <= states[-1].prefix],
                fuas_before,
                size,
                d,
            ),
            "crashlab": lambda: walk_and_check(
                args.log, [s.prefix for s in states], size, d / "c", "crashlab (1 core)"
            ),
            "parallel": lambda: bench_parallel(args.log, states, size, d, args.workers, args.split),
            "floor": lambda: bench_floor(args.log, states, size, d, 1, args.floor_batch),
            "floor-n": lambda: bench_floor(
                args.log, states, size, d, args.workers, args.floor_batch
            ),
        }
        order = [m for m in MODES if m in modes]
        if "floor" in order and args.workers > 1:
            order.append("floor-n")
        print(
            f"{'mode':<22} {'states':>6} {'wall s':>9} {'states/s':>9} {'cpu s':>8} "
            f"{'st/cpu-s':>8}  {'replay':>13} {'check':>13} {'undo':>13}  "
            "(ms per state: mean/median)"
        )
        for m in [m for m in order if m.startswith("peer") and not args.peer.exists()]:
            print(f"{m}: skipped, no replay-log at {args.peer}", file=sys.stderr)
            order.remove(m)
        # In rounds, every mode once a round: a slow spell of this shared machine (the
        # same mode's wall time varied 20 % between runs) then hits all modes alike, and
        # the ratio of one round's runs is read, not the ratio of two unrelated bests.
        rounds: dict[str, list[Timing]] = {m: [] for m in order}
        for _ in range(args.repeat):
            for m in order:
                rounds[m].append(timed(steps[m]))
        for m in order:
            results[m] = min(rounds[m], key=lambda t: t.wall)  # the least disturbed run
            print(results[m].line(), flush=True)
    report(results, rounds)
    print(
        f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"on {os.cpu_count()} CPUs (other guests skew every number)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    m: {
                        "states": t.states,
                        "wall": t.wall,
                        "rate": t.rate,
                        "replay_ms": 1000 * statistics.fmean(t.replay) if t.replay else None,
                        "check_ms": 1000 * statistics.fmean(t.check) if t.check else None,
                        "undo_ms": 1000 * statistics.fmean(t.undo) if t.undo else None,
                    }
                    for m, t in results.items()
                },
                indent=1,
            )
        )


def report(r: dict[str, Timing], rounds: dict[str, list[Timing]]) -> None:
    def ratio(a: str, b: str, what: str, goal: str) -> None:
        if a in r and b in r and r[b].rate:
            print(
                f"{what}: {r[a].rate / r[b].rate:6.2f} wall, "
                f"{r[a].cpu_rate / r[b].cpu_rate:6.2f} per CPU second  {goal}"
            )
        if len(rounds.get(a, ())) > 1 and b in rounds:
            each = [x.rate / y.rate for x, y in zip(rounds[a], rounds[b], strict=True)]
            cpu = [x.cpu_rate / y.cpu_rate for x, y in zip(rounds[a], rounds[b], strict=True)]
            print(
                f"  round by round ({len(each)}): median {statistics.median(each):.2f} wall "
                f"({min(each):.2f}-{max(each):.2f}), {statistics.median(cpu):.2f} per CPU second"
            )

    print()
    ratio("crashlab", "peer", "crashlab / peer (states/s)", "(goal >= 10 on the ~58 MB log)")
    ratio("parallel", "peer", "crashlab xN / peer (states/s)", "")
    ratio("parallel", "floor-n", "crashlab xN / floor xN", "(goal >= 0.8 on larger logs)")
    ratio("crashlab", "floor", "crashlab x1 / floor x1", "")
    ratio("peer-check", "peer", "peer --check fua / peer", "")
    if "crashlab" in r and "floor" in r:
        c, f = r["crashlab"], r["floor"]
        per_c, per_f = c.wall / c.states, f.wall / f.states
        cpu_c, cpu_f = c.cpu / c.states, f.cpu / f.states
        print(
            f"(replay + undo) / check per state: {(per_c - per_f) / per_f:6.3f} wall, "
            f"{(cpu_c - cpu_f) / cpu_f:6.3f} CPU (goal <= 0.1; crashlab {per_c * 1000:.1f} ms "
            f"/ {cpu_c * 1000:.1f} CPU ms vs floor {per_f * 1000:.1f} / {cpu_f * 1000:.1f})"
        )
        direct = (statistics.fmean(c.replay) + statistics.fmean(c.undo)) / statistics.fmean(
            [x - u for x, u in zip(c.check, c.undo, strict=True)]
        )
        print(f"  measured directly (walk + e2undo) / (journal replay -z + fsck): {direct:6.3f}")
    base = next((r[m] for m in ("floor", "crashlab") if m in r), None)
    if base:
        for m, t in r.items():
            differ = sorted(p for p, ok in t.verdicts.items() if base.verdicts.get(p, ok) != ok)
            if differ:
                print(f"VERDICTS DIFFER: {m} vs {base.name} at prefixes {differ[:10]}")
        bad = sorted(p for p, ok in base.verdicts.items() if not ok)
        print(f"inconsistent states ({base.name}): {len(bad)} {bad[:10]}")


if __name__ == "__main__":
    main()
