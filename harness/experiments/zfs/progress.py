"""The scan as a curve: ``zpool status`` sampled in the guest while a scrub or resilver runs.

A sampler loop runs in the guest beside the scan (``start``), writing one sample a
period: the guest's clock, ``zpool status -j`` (examined, issued, repaired bytes) and the
"... to go" estimate of the text output, the ETA an operator reads. ``collect`` stops it
and turns the samples into points relative to the first one; ``report.zfs.eta_errors`` says how far
each ETA was from the finish the scan actually had. Sampling costs the guest a
``zpool status`` per period (~0.1 s under TCG): ``progress_interval = 0`` turns it off.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from harness.check import zpool as parse
from harness.experiments.zfs.pool import POOL, run
from harness.vm.backend import Guest

DIR = "/tmp/crashlab-progress"
# "00:00:30 to go", "1 days 02:03:04 to go" (OpenZFS's secs_to_dhms)
_TO_GO = re.compile(r"(?:(\d+) days? )?(\d+):(\d\d):(\d\d) to go")


def start(g: Guest, interval: float) -> None:
    """Start the sampler in the background of the guest (it outlives this command)."""
    loop = (
        f"i=0; while [ ! -e {DIR}/stop ]; do {_sample('$i')}; i=$((i+1)); sleep {interval:g}; done"
    )
    script = f"rm -rf {DIR}; mkdir -p {DIR}; nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 &"
    run(g, ["sh", "-c", script])


def collect(g: Guest) -> list[dict[str, Any]]:
    """Stop the sampler and take one last sample (the scan may have ended between two);
    the samples as points (``t`` seconds from the first sample)."""
    dump = (
        f"touch {DIR}/stop; {_sample('final')}; cd {DIR} && for f in *.t; do"
        ' n=${f%.t}; echo "@@t $(cat $f)"; echo "@@eta $(cat $n.eta 2>/dev/null)";'
        " cat $n.json 2>/dev/null; done"
    )
    return points(run(g, ["sh", "-c", dump], timeout=120))


def _sample(name: str) -> str:
    """Shell: one sample into ``DIR/name.{t,json,eta}``."""
    return (
        f"t=$(date +%s.%N);"
        f" zpool status -j --json-int -p {POOL} > {DIR}/{name}.json 2>/dev/null;"
        f" zpool status -p {POOL} 2>/dev/null | grep -E 'to go|no estimated' > {DIR}/{name}.eta;"
        f" echo $t > {DIR}/{name}.t"
    )


def points(text: str) -> list[dict[str, Any]]:
    """Parse ``collect``'s dump; samples taken before the scan showed up are dropped."""
    samples = []
    for chunk in text.split("@@t ")[1:]:
        head, _, rest = chunk.partition("\n")
        eta_line, _, body = rest.partition("\n")
        try:
            t = float(head.strip())
            scan = parse.parse_status(body, POOL).scan
        except ValueError:
            continue  # a sample cut short when the loop was stopped
        if scan is not None:
            samples.append((t, eta_line, scan))
    out: list[dict[str, Any]] = []
    t0: float | None = None
    for t, eta_line, scan in sorted(samples, key=lambda s: s[0]):
        t0 = t if t0 is None else t0
        out.append(
            {
                "t": round(t - t0, 3),
                "state": scan.state,
                "to_examine": scan.to_examine,
                "examined": scan.examined,
                "issued": scan.issued,
                "repaired": scan.processed,
                "eta": eta_seconds(eta_line),
            }
        )
    return out


def eta_seconds(line: str) -> int | None:
    m = _TO_GO.search(line)
    if m is None:
        return None
    days, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return ((days * 24 + h) * 60 + mi) * 60 + s
