"""Kernels under test, for real: a Debian kernel package fetched, unpacked and booted
with its own modules; a mutant ext4 built, booted, and caught by the lab while the stock
kernel on the same workload stays clean (campaigns/mutants-ci.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths
from harness.cli.main import main
from harness.image import build as image
from harness.kernel import add
from harness.kernel.store import booting
from harness.vm.backend import GuestSpec, start_guest

pytestmark = pytest.mark.vm

# The smallest reachable kernel of another series than the image's 6.1.
OTHER = "linux-image-6.12.95+deb12-amd64"


def test_a_debian_kernel_boots_with_its_own_modules(guest_image: image.Image) -> None:
    k = add.add(f"deb:{OTHER}", guest_image)
    assert k.release == "6.12.95+deb12-amd64" and k.source["version"].startswith("6.12.95")
    assert k.options["DM_LOG_WRITES"] == "m" and not k.modules["zfs"]
    with booting(k.name), start_guest(GuestSpec()) as g:
        assert g.run(["uname", "-r"], check=True).out.strip() == k.release
        g.run(["modprobe", "dm-log-writes"], check=True)
        g.run(["modprobe", "dm-flakey"], check=True)
        targets = g.run(["dmsetup", "targets"], check=True).out
    assert "log-writes" in targets and "flakey" in targets
    # Outside booting(), guests boot the image's own kernel again.
    assert image.require_image().kernel == guest_image.kernel


def test_a_mutant_is_caught_and_the_stock_kernel_is_not(
    guest_image: image.Image, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = str(paths.REPO / "campaigns" / "mutants-ci.toml")
    db = str(tmp_path / "lab.sqlite")
    assert main(["campaign", "run", camp, "--db", db]) == 0
    capsys.readouterr()
    assert main(["campaign", "mutants", camp, "--db", db, "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    results = {(c["mutant"], c["result"]) for c in d["cells"]}
    assert results == {(None, "clean"), ("ext4-fsync-no-commit", "caught")}
    assert d["rate"] == 1.0 and d["gaps"] == [] and d["false_alarms"] == []
