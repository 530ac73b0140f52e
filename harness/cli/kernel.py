"""``scenario kernel list|add|build``: the kernels a run can boot (``--kernel``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from harness import errors, paths
from harness.cli import ui
from harness.config import scenario
from harness.experiments import lifecycle
from harness.image.build import require_image
from harness.kernel import add as kernel_add
from harness.kernel import bisect as kernel_bisect
from harness.kernel import build as kernel_build
from harness.kernel import mutant
from harness.kernel.store import OPTIONS, Kernel, describe, list_kernels
from harness.report.markup import cells, esc
from harness.store.db import Store

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("kernel", help="kernels to boot guests on: list them, add or build one")
    ksub = p.add_subparsers(dest="kernel_command", metavar="ACTION", required=True)
    ls = ksub.add_parser("list", help="the image's kernel and every cached one")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    a = ksub.add_parser("add", help="fetch or build a kernel into the cache")
    a.add_argument(
        "spec",
        metavar="SPEC",
        help="deb:PACKAGE (a Debian kernel package), tree:PATH (a built tree with "
        "modules_install INSTALL_MOD_PATH=PATH) or mutant:NAME (mutants/NAME.patch on the "
        f"image's kernel; one of: {', '.join(mutant.names())})",
    )
    a.set_defaults(func=cmd_add)
    b = ksub.add_parser(
        "build",
        help="build a kernel source tree with the lab's config fragment "
        "(images/kernel-fragment.config), out of tree, and cache it",
    )
    b.add_argument("tree", metavar="TREE", help="a Linux source tree (left untouched)")
    b.add_argument(
        "--config-base",
        choices=[str(b) for b in kernel_build.Base],
        default=str(kernel_build.Base.DEBIAN),
        help="the config the fragment is merged over: the image kernel's (Debian's: "
        "close to the kernel the lab tests, hours on 2 cores) or the tree's defconfig "
        "(default: %(default)s)",
    )
    b.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="make -j")
    b.set_defaults(func=cmd_build)
    bi = ksub.add_parser(
        "bisect",
        help="which Debian kernel package changed a run's verdict (binary search over the "
        "packages between a good and a bad one), with its changelog lines for the fs",
        description="Boots the packages between --good and --bad, each running --run's "
        "scenario (its workload, seed and settings), and names the first whose verdict "
        "differs from --good's. Exit 0: found; 2: the endpoints agree; 3: a run failed.",
    )
    bi.add_argument("--good", required=True, metavar="RELEASE", help="e.g. 6.1.0-55-amd64")
    bi.add_argument("--bad", required=True, metavar="RELEASE", help="e.g. 6.1.0-54-amd64")
    bi.add_argument("--run", required=True, metavar="RUN", help="a run that shows the finding")
    bi.add_argument("--db", type=Path, default=None, help="results database")
    bi.set_defaults(func=cmd_bisect)


def cmd_list(args: argparse.Namespace) -> int:
    kernels = list_kernels(require_image())
    if args.json:
        print(json.dumps([k.to_json() for k in kernels], indent=2))
        return errors.EXIT_OK
    t = Table("name", "source", "lacks", "dm-dust", "zfs")
    for k in kernels:
        lacks = [o for o in OPTIONS if k.options.get(o) not in ("y", "m")]
        yes = {True: "yes", False: "no"}
        t.add_row(
            *cells(k.name + (" (default)" if k.is_image_kernel else ""), describe(k.source)),
            esc(", ".join(lacks) or "-"),
            yes[k.modules.get("dm-dust", False)],
            yes[k.modules.get("zfs", False)],
        )
    console.print(t)
    return errors.EXIT_OK


_err = ui.console(stderr=True)


def _step(what: str, seconds: float) -> None:
    _err.print(f"  {esc(what)}: {seconds:.1f} s")


def _added(k: Kernel, verb: str) -> int:
    console.print(f"{verb} [bold]{esc(k.name)}[/] ({esc(describe(k.source))}): {esc(k.dir)}")
    console.print(f"run a scenario on it: scenario run NAME --kernel {esc(k.name)}", markup=False)
    return errors.EXIT_OK


def cmd_add(args: argparse.Namespace) -> int:
    _err.print(f"kernel add {esc(args.spec)}")
    return _added(kernel_add.add(args.spec, require_image(), _step), "added")


def cmd_build(args: argparse.Namespace) -> int:
    _err.print(f"kernel build {esc(args.tree)} (config base: {esc(args.config_base)})")
    built = kernel_build.build(
        Path(args.tree), kernel_build.Base(args.config_base), args.jobs, _step
    )
    _err.print(f"  build log: {esc(built.log)}")
    return _added(built.kernel, "built" if built.built_now else "cached")


def cmd_bisect(args: argparse.Namespace) -> int:
    db = args.db or paths.default_db()
    with Store.open(db, create=False) as st:
        run = st.run(args.run)
    steps = kernel_bisect.between(args.good, args.bad, kernel_bisect.available(args.bad))
    base = [o for o in run.params.get("overrides", ()) if not o.startswith(("kernel=", "expect="))]
    console.print(
        f"bisect {esc(run.scenario)} (run {esc(run.id)}) over {len(steps)} packages: "
        f"{esc(steps[0])} (good) .. {esc(steps[-1])} (bad)"
    )

    def verdict(release: str) -> bool:
        if release == run.guest_kernel and run.account is not None:
            found = run.account.findings > 0
        else:
            sc = scenario.load(
                run.params["path"], scenario.seeded([*base, f"kernel={release}"], run.seed)
            )
            with ui.progress(f"{sc.name} on {release}") as progress:
                report = lifecycle.execute(sc, db=db, progress=progress)
            if report.account.harness:
                raise errors.HarnessError(f"the run on {release} failed: {report.run_id}")
            found = report.account.findings > 0
        console.print(f"  {esc(release)}: {'finding' if found else 'clean'}")
        return found

    start = time.monotonic()
    b = kernel_bisect.bisect(steps, verdict)
    first = b.first_changed
    assert first is not None
    i = steps.index(first)
    older, newer = sorted((steps[i - 1], first), key=kernel_bisect.number)
    said = {True: "finding", False: "clean"}
    console.print(
        f"the verdict changes at {esc(first)} ({said[b.verdicts[first]]}; "
        f"{esc(steps[i - 1])}: {said[b.verdicts[steps[i - 1]]]}): {len(b.verdicts)} packages "
        f"booted in {time.monotonic() - start:.0f} s"
    )
    section = kernel_bisect.upload_section(
        kernel_bisect.changelog(newer), kernel_bisect.version(older)
    )
    lines = kernel_bisect.fs_lines(section, str(run.fs or ""))
    console.print(
        f"{esc(newer)}'s changelog, {len(lines)} {esc(run.fs or '')} entries since {esc(older)}:"
    )
    for line in lines:
        console.print(f"  {esc(line)}", markup=False)
    return errors.EXIT_OK
