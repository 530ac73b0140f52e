"""The kernel a run boots: the image's own, a cached one, or one added on first use
(a mutant, a Debian package's, a user's ``--fs-patch``) -- above ``add`` and ``mutant``,
which build entries of the cache (``store.py``) and so import it; the cache itself
imports neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.errors import InputError
from harness.image import build
from harness.image.build import Image
from harness.kernel import add, mutant, store
from harness.kernel.store import Kernel


@contextmanager
def booting(name: str | None) -> Iterator[Kernel | None]:
    """Within: every guest boots kernel ``name`` (a release, ``<release>+<mutant>``, or
    ``+<mutant>`` of the image's kernel); None (or the image's release): the image's own,
    and nothing changes."""
    if name is None:
        yield None
        return
    if "/" in name:  # --fs-patch FILE (a release never has a '/'): built, cached by hash
        mutant.check_patch(Path(name))
        with store.adding():
            k = add.add(f"patch:{name}", build.require_image())
        with build.booting(k.boot_image):
            yield k
        return
    if name.startswith("+"):  # "+MUTANT": a mutant of the image's kernel, whichever it is
        name = str(build.require_image().manifest.get("kernel")) + name
    with store.adding():  # looked up again once another process has added it
        found = [k for k in store.cached() if k.name == name]
        k = found[0] if found else _fetch(name, build.require_image())
    with build.booting(None if k.is_image_kernel else k.boot_image):
        yield k


def _fetch(name: str, img: Image) -> Kernel:
    """A kernel not cached yet, added on first use when its name says how: the image's
    kernel, ``<image release>+<mutant>`` (built from mutants/), or a Debian kernel
    package's release (``linux-image-<name>``). A campaign over kernels then needs no
    step before it; ``scenario kernel add`` does the same up front."""
    base, _, patch = name.partition("+")
    if name == store.image_kernel(img).name:
        return store.image_kernel(img)
    if patch and base == store.image_kernel(img).release and patch in mutant.names():
        return add.add(f"mutant:{patch}", img)
    try:
        return add.add(f"deb:linux-image-{name}", img)
    except InputError:
        return store.resolve(name, img)  # not a package either: say what the lab has
