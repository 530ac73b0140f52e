"""``scenario import FORMAT FILE -o OUT.toml``: another tool's workload as a scenario --
a vdbench parameter file as a workload scenario (harness/config/vdbench.py; the mapping
is in docs/vdbench.md), a CrashMonkey j-lang file as a crash scenario whose workload is
a workload file (harness/experiments/crash/jlang.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness import errors
from harness.cli import ui
from harness.cli.lab import to_toml
from harness.config import scenario, vdbench
from harness.errors import InputError
from harness.experiments.crash import jlang
from harness.experiments.workload.experiment import check_job

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("import", help="turn another tool's workload file into a scenario")
    p.add_argument("format", choices=("vdbench", "jlang"), help="the file's tool")
    p.add_argument("file", type=Path, metavar="FILE", help="the parameter or j-lang file")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.toml")
    p.add_argument(
        "--fs",
        metavar="TYPE",
        help=f"jlang: the filesystem (j-lang names none; default {jlang.FS_DEFAULT})",
    )
    p.add_argument("--force", action="store_true", help="overwrite OUT.toml")
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    out: Path = args.output
    if out.suffix != ".toml":
        raise InputError(f"-o {out}: a scenario file ends in .toml")
    if out.exists() and not args.force:
        raise InputError(f"{out}: exists", hint="pass --force to overwrite it")
    if args.fs and args.format != "jlang":
        raise InputError(f"--fs: {args.format} files give their own target", hint="drop --fs")
    if args.format == "jlang":
        data = jlang.scenario_data(args.file, args.fs)
    else:
        data = vdbench.import_file(args.file)
    notes = data.pop("_notes")
    header = [f"# imported from {args.file} by `scenario import {args.format}`"]
    header += ["# approximations:", *([f"#   - {n}" for n in notes] or ["#   (none)"])]
    text = "\n".join(header) + "\n" + to_toml(data)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    try:
        sc = scenario.load(tmp.rename(out))
        if args.format == "vdbench":
            check_job(sc)  # type: ignore[arg-type]
    except InputError:
        out.unlink(missing_ok=True)
        raise
    console.print(f"wrote {out}: {len(notes)} approximation(s), see its header", markup=False)
    console.print(f"run it: scenario run {out}", markup=False)
    return errors.EXIT_OK
