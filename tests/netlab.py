"""A lab of several hosts on one machine: network namespaces joined by a bridge, a `dask
scheduler` in one, a `dask worker` in each of the others, every worker with its own
address, hostname and lab cache (the image and kernels shipped into it).

What it is for: testing ``--dask tcp://...`` across hosts for real -- traffic between
addresses through veth pairs, not loopback; a host whose link is cut (``Netlab.cut``)
drops off the network while its processes keep running, as a pulled cable does. What it
does not separate: the filesystem (a check-log scenario and its log are read at the same
path everywhere, as on hosts that share a checkout's layout); the cache is separate
because the fixture points each worker at its own (``CRASHLAB_CACHE``).

Layout (``N`` a free third octet, so two test sessions do not collide)::

    root namespace: bridge clNNNNNbr 10.77.N.1 (the client: the campaign's process)
      crashlab-clNNNNN-sched   eth0 10.77.N.2   dask scheduler :8786
      crashlab-clNNNNN-w1      eth0 10.77.N.11  dask worker, ports 8788 (worker) 8789 (nanny)
      crashlab-clNNNNN-w2      eth0 10.77.N.12  ...

Everything is removed on the way out, also on failure (processes first, by namespace,
then the namespaces, which take their veth ends with them, then the bridge); a session
that was SIGKILLed leaves names with its pid, swept by the next one (``sweep``).
Needs root and ``ip netns``; ``available`` says why not.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness import proc
from harness.check import distributed
from harness.errors import InputError

BIN = Path(sys.executable).parent
SCHEDULER_PORT = 8786
WORKER_PORT, NANNY_PORT = 8788, 8789
# What a cut link costs (docs/hosts.md): the scheduler drops a worker, and gives its tasks
# to others, when its connection to the worker breaks (TCP_TIMEOUT: data unacknowledged
# that long; distributed's default 30 s), or earlier after WORKER_TTL without a heartbeat
# (default 5 minutes) plus the connect timeout of its request to the worker's nanny to
# restart it (default 30 s), which a host that is gone never answers.
# The lab's (docs/hosts.md): the TCP timeout short, the lowest distributed takes (it
# is the kernel's: acknowledgements do not wait for a busy worker); the TTL left long,
# since a worker dropped for a late heartbeat is restarted, its guests with it.
WORKER_TTL = "300s"
CONNECT_TIMEOUT = "30s"
TCP_TIMEOUT = "12s"
GRACE = 5.0  # seconds the lab's processes have to stop on SIGTERM
OURS = re.compile(r"^crashlab-cl(\d+)-\w+$|^cl(\d+)br$")


@dataclass
class Host:
    """One namespace: its name, address, hostname, lab cache and the process it runs."""

    ns: str
    address: str
    hostname: str
    root: Path  # its own disk: cache, temp, Dask's local directory
    veth: str  # the bridge's end of its link
    popen: subprocess.Popen[bytes] | None = None

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def log(self) -> str:
        p = self.root / "process.log"
        return p.read_text(errors="replace") if p.exists() else ""


@dataclass
class Netlab:
    """The namespaces of one lab; ``scheduler`` and ``workers`` once started."""

    tag: str
    subnet: str  # "10.77.N"
    root: Path
    hosts: list[Host] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def client_address(self) -> str:
        return f"{self.subnet}.1"

    @property
    def scheduler(self) -> Host:
        return self.hosts[0]

    @property
    def workers(self) -> list[Host]:
        return self.hosts[1:]

    @property
    def address(self) -> str:
        """The scheduler's address, as a user gives it to --dask."""
        return f"tcp://{self.scheduler.address}:{SCHEDULER_PORT}"

    def add(self, role: str, octet: int) -> Host:
        """A namespace ``role`` at ``.octet``, linked to the bridge by a veth pair."""
        i = len(self.hosts)
        h = Host(
            ns=f"crashlab-{self.tag}-{role}",
            address=f"{self.subnet}.{octet}",
            hostname=f"lab-{role}",
            root=self.root / role,
            veth=f"{self.tag}v{i}",
        )
        self.hosts.append(h)  # before it exists: close() removes what was made
        h.root.mkdir(parents=True, exist_ok=True)
        (h.root / "tmp").mkdir(exist_ok=True)
        ip("netns", "add", h.ns)
        ip("link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
        ip("link", "set", h.veth, "master", self.bridge, "up")
        ip("-n", h.ns, "addr", "add", f"{h.address}/24", "dev", "eth0")
        ip("-n", h.ns, "link", "set", "eth0", "up")
        ip("-n", h.ns, "link", "set", "lo", "up")
        return h

    def start(self, h: Host, argv: list[str | Path], env: Mapping[str, str] = {}) -> None:
        """Run ``argv`` in ``h``'s namespace, under its own hostname, with its own cache
        and temporary directory; output to ``h.root/process.log``."""
        full = {
            **os.environ,
            "CRASHLAB_CACHE": str(h.cache),
            "TMPDIR": str(h.root / "tmp"),
            **env,
        }
        full.pop("CRASHLAB_WORK", None)  # under the host's own cache
        with (h.root / "process.log").open("wb") as out:
            h.popen = subprocess.Popen(
                ["ip", "netns", "exec", h.ns, "unshare", "--uts", "sh", "-c",
                 'hostname "$0" && exec "$@"', h.hostname, *map(str, argv)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=full, start_new_session=True,
            )  # fmt: skip

    def start_scheduler(self) -> None:
        h = self.scheduler
        self.start(
            h,
            [BIN / "dask", "scheduler", "--host", h.address, "--port", str(SCHEDULER_PORT),
             "--no-dashboard"],
            env={
                "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": WORKER_TTL,
                "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": CONNECT_TIMEOUT,
                "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": TCP_TIMEOUT,
            },
        )  # fmt: skip

    def start_worker(self, h: Host) -> None:
        """A worker as docs/hosts.md starts one: its ports pinned, one thread (one
        element at a time per worker)."""
        self.start(
            h,
            [BIN / "dask", "worker", self.address, "--host", h.address,
             "--worker-port", str(WORKER_PORT), "--nanny-port", str(NANNY_PORT),
             "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
             "--local-directory", h.root / "dask"],
        )  # fmt: skip

    def wait_for_workers(self, n: int, timeout: float = 90.0) -> None:
        """Until ``n`` workers have joined the scheduler (asked from the client's side,
        as the lab connects: a scheduler that accepts and never answers is a failure)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with distributed.connect(self.address) as c:
                    c.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                    return
            except (InputError, TimeoutError):
                if time.monotonic() > deadline:
                    raise TimeoutError(self.logs()) from None
                time.sleep(0.5)

    def cut(self, h: Host) -> None:
        """Pull ``h``'s cable: its link down at the bridge; its processes keep running."""
        ip("link", "set", h.veth, "down")

    def logs(self) -> str:
        return "\n".join(f"--- {h.ns}\n{h.log()[-2000:]}" for h in self.hosts)

    def close(self) -> None:
        # Workers first, then the scheduler; SIGTERM, so an element's process removes its
        # scratch files (/dev/shm) as a stopped run does, and multiprocessing's resource
        # tracker its semaphores once the rest is gone; SIGKILL what is left after GRACE.
        for h in reversed(self.hosts):
            if h.popen is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(h.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE
        for h in reversed(self.hosts):
            if h.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    h.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
                _end_group(h.popen.pid, deadline)
                h.popen.wait(timeout=30)
        for h in self.hosts:
            # The pair's root end first: a namespace is freed lazily, and with it its
            # veth, so a next lab's same name could still find this one.
            ip("link", "del", h.veth, check=False)
            remove_namespace(h.ns)
        ip("link", "del", self.bridge, check=False)


def _end_group(pgid: int, deadline: float) -> None:
    """Until process group ``pgid`` is empty or ``deadline``; then SIGKILL what is left."""
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def ip(*args: str, check: bool = True) -> str:
    return proc.run(["ip", *args], check=check, timeout=30).stdout


def available() -> str | None:
    """Why this machine cannot make a netlab, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs `ip` (iproute2) and `unshare` (util-linux)"
    probe = f"crashlab-probe-{os.getpid()}"
    if proc.run(["ip", "netns", "add", probe], check=False, timeout=30).returncode != 0:
        return "this kernel or container cannot create network namespaces"
    ip("netns", "del", probe)
    return None


def remove_namespace(ns: str) -> None:
    """Kill what runs in ``ns`` (a worker's element children too), then delete it."""
    out = proc.run(["ip", "netns", "pids", ns], check=False, timeout=30).stdout
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    ip("netns", "del", ns, check=False)


def sweep() -> None:
    """Remove the namespaces and bridges of netlabs whose test session is gone (killed)."""
    names = ip("netns", "list").split() + [
        line.split(":")[1].strip().split("@")[0]
        for line in ip("-o", "link", "show", "type", "bridge").splitlines()
    ]
    for name in names:
        m = OURS.match(name)
        if m and not Path(f"/proc/{m.group(1) or m.group(2)}").exists():
            if name.startswith("crashlab-"):
                remove_namespace(name)
            else:
                ip("link", "del", name, check=False)


def free_subnet() -> str:
    """A 10.77.N prefix no interface of this machine uses."""
    used = set(re.findall(r"inet 10\.77\.(\d+)\.", ip("-4", "-o", "addr")))
    n = next(n for n in range(os.getpid() % 200, 256) if str(n) not in used)
    return f"10.77.{n}"


def ship(src: Path, dst: Path, image_hash: str) -> None:
    """Put the lab's image ``image_hash``, its kernels and its own host programs (``bin``)
    from cache ``src`` into cache ``dst``, as docs/hosts.md's rsync does: hard links
    here (one disk), a copy where links cannot go."""
    for part in (Path("images") / image_hash, Path("kernels"), Path("bin")):
        if (src / part).exists():
            shutil.copytree(src / part, dst / part, copy_function=_link_or_copy)


def _link_or_copy(a: str, b: str) -> None:
    try:
        os.link(a, b)
    except OSError:
        shutil.copy2(a, b)


@contextlib.contextmanager
def netlab(root: Path, workers: int = 2, ship_from: Path | None = None,
           image_hash: str = "") -> Iterator[Netlab]:  # fmt: skip
    """A scheduler and ``workers`` workers, each in its own namespace, joined and ready;
    each worker's cache filled from ``ship_from`` first. Removed on the way out."""
    sweep()
    lab = Netlab(tag=f"cl{os.getpid()}", subnet=free_subnet(), root=root)
    try:
        ip("link", "add", lab.bridge, "type", "bridge")
        ip("addr", "add", f"{lab.client_address}/24", "dev", lab.bridge)
        ip("link", "set", lab.bridge, "up")
        lab.add("sched", 2)
        for i in range(workers):
            h = lab.add(f"w{i + 1}", 11 + i)
            if ship_from is not None:
                ship(ship_from, h.cache, image_hash)
        lab.start_scheduler()
        for h in lab.workers:
            lab.start_worker(h)
        lab.wait_for_workers(workers)
        yield lab
    finally:
        lab.close()
