"""``scenario list`` and ``scenario show``: the scenario catalogue on the command line.

``scenario schema`` prints the JSON Schema editors check scenario files with;
``run`` and ``reproduce`` are added by ``register_run_commands``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from harness import errors, outcome, paths
from harness.cli import ui
from harness.config import scenario, schema
from harness.report.markup import esc

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list the scenario catalogue")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show a scenario with every default filled in")
    p.add_argument("name", metavar="NAME", help="scenario name or path to a TOML file")
    add_set_option(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "schema", help="print the JSON Schema of scenario or campaign files (for editors)"
    )
    p.add_argument(
        "--kind",
        choices=["scenario", *schema.kinds()],
        default="scenario",
        help="which files (scenario: every scenario kind, told apart by `kind`)",
    )
    p.add_argument("--write", action="store_true", help="rewrite docs/schema/*.json")
    p.set_defaults(func=cmd_schema)

    register_run_commands(sub)


def cmd_schema(args: argparse.Namespace) -> int:

    if args.write:
        for path in schema.write():
            console.print(f"wrote {path}", markup=False)
        return errors.EXIT_OK
    s = schema.scenario_schema() if args.kind == "scenario" else schema.schema(args.kind)
    print(json.dumps(s, indent=2, sort_keys=True))
    return errors.EXIT_OK


def register_run_commands(sub: Any) -> None:
    """``scenario run`` and ``scenario reproduce`` live in harness/cli/run.py."""
    from harness.cli import run as cli_run

    cli_run.register(sub, add_set_option)


def add_set_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. fs.disk_size=1G or workload.ops=500 (repeatable)",
    )


def cmd_list(args: argparse.Namespace) -> int:
    good, bad = scenario.survey()
    table = Table(box=None, pad_edge=False)
    # The name is what a user types next: never cut; the other columns give way first.
    table.add_column("name", no_wrap=True, min_width=max(len(s.name) for s in good) if good else 4)
    for col in ("fs", "mode", "workload", "states"):
        table.add_column(col, no_wrap=True)
    table.add_column("description", overflow="fold", min_width=30)
    for s in good:
        first = s.description.split(". ")[0].rstrip(".")
        first = first if len(first) <= 90 else first[:87] + "..."
        cols = s.catalogue_row()
        table.add_row(*(esc(c) for c in (s.name, *cols, first)))
    for b in bad:
        table.add_row(esc(b.name), "", "", "", "", f"[red]error:[/] {esc(b.error)}")
    console.print(table)
    if not good and not bad:
        console.print(f"no scenarios in {paths.scenarios_dir()}", markup=False)
    # Broken files are input errors: the table still prints, the status says so.
    return outcome.input_status(bool(bad))


def cmd_show(args: argparse.Namespace) -> int:
    s = scenario.load(args.name, args.set)
    data = s.resolved()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(to_toml(data), end="")
    return errors.EXIT_OK


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        if "\n" in v:
            return '"""\n' + v.replace("\\", "\\\\").replace('"""', '\\"""') + '"""'
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in _set(v).items()) + " }"
    return repr(v)


def _set(d: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: an unset value (None) is left out, as in the scenario file."""
    return {k: v for k, v in d.items() if v is not None}


def to_toml(data: dict[str, Any]) -> str:
    """Enough TOML for a resolved scenario: scalars, lists and one level of tables."""
    top = [f"{k} = {_value(v)}" for k, v in _set(data).items() if not isinstance(v, dict)]
    tables = [
        f"\n[{k}]\n" + "".join(f"{kk} = {_value(vv)}\n" for kk, vv in _set(v).items())
        for k, v in data.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top) + "\n" + "".join(tables)
