"""``scenario kernel list|add``: the kernels a run can boot (``--kernel``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from harness import errors
from harness.cli import ui
from harness.image.build import require_image
from harness.kernel import add as kernel_add
from harness.kernel import mutant
from harness.kernel.store import OPTIONS, describe, list_kernels
from harness.report.markup import cells, esc

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("kernel", help="kernels to boot guests on: list them, add one")
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


def cmd_add(args: argparse.Namespace) -> int:
    err = ui.console(stderr=True)

    def step(what: str, seconds: float) -> None:
        err.print(f"  {esc(what)}: {seconds:.1f} s")

    err.print(f"kernel add {esc(args.spec)}")
    k = kernel_add.add(args.spec, require_image(), step)
    console.print(f"added [bold]{esc(k.name)}[/] ({esc(describe(k.source))}): {esc(k.dir)}")
    console.print(f"run a scenario on it: scenario run NAME --kernel {esc(k.name)}", markup=False)
    return errors.EXIT_OK
