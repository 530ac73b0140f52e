"""What one repetition of a ZFS scenario runs: the pool's layout and shape (``Layout``,
``PoolSpec``) and a point of the sweep (``Cell``: the pool, the fill, the load; its
label). ``settings.py`` builds them from a scenario's keys (``ZfsScenario.pool``,
``cells``); the pool, scan and fill steps take them. Apart so that each reads in one
sitting."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from harness.config.settings import size_text
from harness.vm.media import Media


class Layout(StrEnum):
    MIRROR = "mirror"
    RAIDZ1 = "raidz1"
    RAIDZ2 = "raidz2"
    RAIDZ3 = "raidz3"
    DRAID1 = "draid1"
    DRAID2 = "draid2"
    DRAID3 = "draid3"

    @property
    def parity(self) -> int:
        """How many disks the layout can lose (for a mirror: all but one, set per pool)."""
        return 0 if self is Layout.MIRROR else int(self.value[-1])

    def min_disks(self) -> int:
        return 2 if self is Layout.MIRROR else self.parity + 1

    def redundancy(self, disks: int) -> int:
        return disks - 1 if self is Layout.MIRROR else self.parity


DEFAULT_RECORDSIZE = 128 * 1024
DEFAULT_ASHIFT = 12
DRAID_LAYOUTS = (Layout.DRAID1, Layout.DRAID2, Layout.DRAID3)
SEQUENTIAL_LAYOUTS = (Layout.MIRROR, *DRAID_LAYOUTS)


@dataclass(frozen=True)
class PoolSpec:
    layout: Layout
    disks: int
    disk_size: int
    ashift: int
    recordsize: int
    cache: bool
    log: bool
    draid_spares: int = 0  # dRAID's distributed spares (draidN:Ns)
    media: Media = Media.NONE  # the data disks' and spares' (harness/vm/media.py)
    cache_media: Media = Media.SSD  # the cache and log disks'

    @property
    def distributed_spare(self) -> bool:
        return self.draid_spares > 0

    def spare_name(self, k: int) -> str:
        """The k-th distributed spare's vdev name: ``draid<parity>-<top-level vdev>-<k>``."""
        return f"{self.layout}-0-{k}"


@dataclass(frozen=True)
class Cell:
    """One point of the experiment: what a repetition runs."""

    pool: PoolSpec
    fill: float
    load: bool = False  # a fio job runs on the pool during the scan

    def label(self) -> str:
        p = self.pool
        extra = [
            *([f"rs {size_text(p.recordsize)}"] if p.recordsize != DEFAULT_RECORDSIZE else []),
            *([f"ashift {p.ashift}"] if p.ashift != DEFAULT_ASHIFT else []),
            *(["+cache"] if p.cache else []),
            *(["+log"] if p.log else []),
            *([f"+{p.draid_spares}s"] if p.draid_spares else []),
            *(["+load"] if self.load else []),
            *([f"on {p.media}"] if p.media != Media.NONE else []),
            *(
                [f"cache on {p.cache_media}"]
                if (p.cache or p.log) and p.media != Media.NONE
                else []
            ),
        ]
        return " ".join([f"{p.layout} x{p.disks} fill {self.fill:g}%", *extra])
