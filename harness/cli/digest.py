"""``scenario campaign digest FILE``: the morning digest of a campaign's last night
against the night before (harness/report/digest.py), as Markdown, a mail file and JUnit
in a folder of the night's own, and a command of the user's called with it. Exit 1 when
something new needs a person, else 0; a notification that fails is said and changes
neither the exit status nor the files."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from harness import outcome, paths
from harness.cli import ui
from harness.config import campaign
from harness.report import digest
from harness.store.db import Store

console = ui.console()


def register(csub: Any) -> None:
    p = csub.add_parser(
        "digest",
        help="what changed since the night before: new and gone clusters, worse verdicts, "
        "slower recovery, harness failures, time and disk",
        description="The last night of the campaign FILE against the one before: Markdown, "
        "a mail file and JUnit under --out; exit 1 when something new needs a person.",
    )
    p.add_argument(
        "file", type=Path, metavar="FILE", help="campaign TOML, e.g. campaigns/nightly.toml"
    )
    p.add_argument("--db", type=Path, default=None, help="the store (default results/lab.sqlite)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for digest.md, digest.eml, digest.junit.xml "
                   "(default results/digest/NAME/NIGHT)")  # fmt: skip
    p.add_argument("--mail-to", default="root", help="the mail file's To (default root)")
    p.add_argument("--notify", default=None, metavar="CMD",
                   help="a command called with the digest's Markdown path, last")  # fmt: skip
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_digest)


def cmd_digest(args: argparse.Namespace) -> int:
    name = campaign.load(args.file).name
    with Store.open(args.db or paths.default_db(), create=False) as store:
        d = digest.build(store, name)
    out = args.out or paths.REPO / "results" / "digest" / name / d.night
    out.mkdir(parents=True, exist_ok=True)
    md = out / "digest.md"
    md.write_text(digest.markdown(d))
    (out / "digest.eml").write_bytes(digest.mail(d, args.mail_to))
    (out / "digest.junit.xml").write_bytes(digest.junit(d))
    if args.json:
        console.out(json.dumps({**digest.to_json(d), "folder": str(out)}, indent=2))
    else:
        console.print(digest.markdown(d), markup=False, soft_wrap=True)
        console.print(f"digest: {md}", markup=False)
    if args.notify:
        _notify(args.notify, md)
    return outcome.status(finding=d.needs_a_person)  # 1: news that needs a person


def _notify(command: str, md: Path) -> None:
    """The user's command, with the digest; its failure is said, never fatal: the night's
    results and the digest are already on disk."""
    argv = [*shlex.split(command), str(md)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        console.print(f"notify: {shlex.join(argv)} could not run: {e}", markup=False)
        return
    if r.returncode != 0:
        said = (r.stderr or r.stdout).strip()[-300:]
        console.print(f"notify: {argv[0]} exited {r.returncode}: {said}", markup=False)
