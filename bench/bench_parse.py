"""Log parse throughput against a plain sequential read of the same file.

    python3 bench/bench_parse.py [--entries 110000] [--write-kib 4] [--keep PATH]

Writes a synthetic dm-log-writes log (writes with a FLUSH every 16 entries and a mark
every 1000), then times, warm in the page cache, the best of a few runs of (a) reading
the file sequentially in 1 MiB chunks and (b) ``open_log``, which parses every header.
The ratio is parse throughput / read throughput; the goal is >= 0.5.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.record.logwrites import FLUSH, MAGIC, MARK, VERSION, open_log
from harness.replay.crashstates import generate

SECTORSIZE = 512


def write_log(path: Path, entries: int, write_bytes: int) -> None:
    payload = os.urandom(write_bytes)
    nr = write_bytes // SECTORSIZE
    with path.open("wb") as f:
        f.write(struct.pack("<QQQI", MAGIC, VERSION, entries, SECTORSIZE).ljust(SECTORSIZE, b"\0"))
        chunk = bytearray()
        for i in range(entries):
            if i % 1000 == 0:
                text = (f"crashlab:sync:{i // 1000}" if i else "crashlab:mkfs").encode()
                chunk += (struct.pack("<QQQQ", 0, 0, MARK, len(text)) + text).ljust(
                    SECTORSIZE, b"\0"
                )
            elif i % 16 == 0:
                chunk += struct.pack("<QQQQ", 0, 0, FLUSH, 0).ljust(SECTORSIZE, b"\0")
            else:
                sector = (i * nr) % (1 << 21)
                chunk += struct.pack("<QQQQ", sector, nr, 0, 0).ljust(SECTORSIZE, b"\0")
                chunk += payload
            if len(chunk) > 1 << 24:
                f.write(chunk)
                chunk.clear()
        f.write(chunk)


def best(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_all(path: Path) -> None:
    with path.open("rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        while f.readinto(buf):
            pass


def parse(path: Path) -> None:
    with open_log(path) as log:
        assert len(log.entries) > 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=110_000)
    ap.add_argument("--write-kib", type=int, default=4)
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = args.keep or Path(d) / "bench.log"
        write_log(path, args.entries, args.write_kib * 1024)
        size = path.stat().st_size
        read_all(path)  # warm the page cache: we measure parsing, not the disk
        t_read = best(lambda: read_all(path))
        t_parse = best(lambda: parse(path))
        with open_log(path) as log:
            t = time.perf_counter()
            _ = log.hash
            t_hash = time.perf_counter() - t
            t = time.perf_counter()
            specs: list[dict[str, object]] = [
                {"kind": "flush"},
                {"kind": "mark"},
                {"kind": "every", "n": 100},
                {"kind": "reorder", "max_states": 256},
                {"kind": "torn", "max_states": 64},
            ]
            states = generate(log, specs, seed=1)
            t_gen = time.perf_counter() - t
        mib = size / (1 << 20)
        print(f"log: {args.entries} entries, {mib:.0f} MiB")
        print(f"sequential read: {t_read * 1000:8.1f} ms  {mib / t_read:8.0f} MiB/s")
        print(
            f"parse (open_log): {t_parse * 1000:7.1f} ms  {mib / t_parse:8.0f} MiB/s  "
            f"{args.entries / t_parse / 1e6:.2f} M entries/s"
        )
        print(f"sha256 (log.hash): {t_hash * 1000:6.1f} ms")
        print(f"generate ({len(states)} states, log hashed): {t_gen * 1000:6.1f} ms")
        print(f"ratio parse/read throughput: {t_read / t_parse:.2f}  (goal >= 0.5)")


if __name__ == "__main__":
    main()
