"""``scenario kernel list|add|build``: the kernels a run can boot (``--kernel``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.table import Table

from harness import errors
from harness.cli import ui
from harness.image.build import require_image
from harness.kernel import add as kernel_add
from harness.kernel import build as kernel_build
from harness.kernel import mutant
from harness.kernel.store import OPTIONS, Kernel, describe, list_kernels
from harness.report.markup import cells, esc

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
