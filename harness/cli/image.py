"""``scenario image build|status``: the cached guest image."""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness import paths
from harness.cli import ui
from harness.image import build as image
from harness.report.markup import cells, esc

STEPS = ["mmdebstrap", "kernel and initrd", "root filesystem", "qcow2"]


def register(sub: Any) -> None:
    p = sub.add_parser("image", help="build or inspect the cached guest image")
    isub = p.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    b = isub.add_parser(
        "build", help="build the guest image (no-op when the cache matches the recipe)"
    )
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.set_defaults(func=cmd_build)
    s = isub.add_parser(
        "status", help="which image is cached, its recipe hash, kernel, ZFS version, size"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)
    pr = isub.add_parser(
        "prune", help="delete cached images of older recipes (and half-built ones)"
    )
    pr.add_argument("--dry-run", action="store_true", help="only say what would go")
    pr.set_defaults(func=cmd_prune)


def cmd_build(args: argparse.Namespace) -> int:
    console = ui.console(stderr=True)
    recipe = image.load_recipe()
    if not args.force and (img := image.cached(recipe)) is not None:
        console.print(
            f"image {recipe.hash} is cached and matches the recipe: {img.dir}", markup=False
        )
        return 0
    logfile = paths.images_dir() / f"{recipe.hash}.build.log"
    result: dict[str, Any] = {}
    timeline = _Timeline(console, logfile)

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        # the build log's last line: mmdebstrap's and apt's text, never markup
        TextColumn("{task.fields[last]}", style="dim", markup=False),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(f"image {recipe.hash}", total=len(STEPS), last="")
        state = {"done": 0}

        def on_step(name: str) -> None:
            idx = next((i for i, s in enumerate(STEPS) if name.startswith(s)), state["done"])
            state["done"] = idx
            bar.update(task, completed=idx, description=f"image {recipe.hash}: {name}")
            timeline.step(name)

        def work() -> None:
            try:
                result["image"], _ = image.build(recipe, force=args.force, on_step=on_step)
            except BaseException as e:  # re-raised in the main thread
                result["error"] = e

        t = threading.Thread(target=work, daemon=True)
        t.start()
        while t.is_alive():
            t.join(0.5)
            bar.update(task, last=_last_line(logfile))
            timeline.poll()
        timeline.begin(None)
        if "error" in result:
            raise result["error"]
        bar.update(task, completed=len(STEPS), last="")
    img = result["image"]
    console.print(
        f"built image {img.hash} in {img.manifest.get('build_seconds')} s: {img.dir}",
        markup=False,
    )
    return 0


class _Timeline:
    """Each phase of the build with its seconds, printed when the next one starts: the
    lab's steps and mmdebstrap's own (its ``I:`` lines in the build log), so a build
    piped into a file says where its minutes went instead of leaving one bar line."""

    PHASES = ("I: running", "I: downloading", "I: extracting", "I: installing", "I: cleaning")

    def __init__(self, out: Console, logfile: Path) -> None:
        self.out, self.logfile = out, logfile
        logfile.unlink(missing_ok=True)  # an earlier build's; the build writes it anew
        self.offset = 0
        self.name: str | None = None
        self.start = time.monotonic()
        self.lock = threading.Lock()  # the build's thread begins steps, ours polls

    def step(self, name: str) -> None:
        """A step of the lab's own: mmdebstrap's last lines are read first, so the phase
        they began ends here and not after this step."""
        with self.lock:
            self._read()
            self.begin(name)

    def begin(self, name: str | None) -> None:
        now = time.monotonic()
        if self.name is not None:
            self.out.print(f"  {now - self.start:6.1f} s  {self.name}", markup=False)
        self.name, self.start = name, now

    def poll(self) -> None:
        with self.lock:
            self._read()

    def _read(self) -> None:
        try:
            with open(self.logfile, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        done = chunk.rfind(b"\n") + 1  # whole lines only; the rest is read next time
        self.offset += done
        for line in chunk[:done].decode(errors="replace").splitlines():
            if line.startswith(self.PHASES):
                # "I: running --customize-hook directly: /path" -> its words, no path
                self.begin("mmdebstrap: " + line[3:].split(":")[0].rstrip(". "))


def _last_line(logfile: Any) -> str:
    try:
        with open(logfile, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return (lines[-1] if lines else "")[:60]
    except OSError:
        return ""


def cmd_status(args: argparse.Namespace) -> int:
    import json

    recipe = image.load_recipe()
    imgs = image.all_cached()
    rows: list[dict[str, Any]] = []
    for img in imgs:
        m = img.manifest
        rows.append(
            {
                "hash": img.hash,
                "current": img.hash == recipe.hash,
                "kernel": m.get("kernel"),
                "zfs": m.get("zfs_version"),
                "size_bytes": m.get("size_bytes"),
                "built_at": m.get("built_at"),
                "build_seconds": m.get("build_seconds"),
                "path": str(img.dir),
            }
        )
    if args.json:
        print(json.dumps({"recipe_hash": recipe.hash, "images": rows}, indent=2))
        return 0
    console = ui.console()
    console.print(
        f"recipe {esc(recipe.path)}: hash [bold]{recipe.hash}[/], kernel {esc(recipe.kernel)}"
    )
    if not rows:
        console.print("no image cached yet: run [bold]scenario image build[/]")
        return 0
    t = Table("hash", "current", "kernel", "ZFS", "size", "built", "build time")
    for r in rows:
        t.add_row(
            *cells(r["hash"], "yes" if r["current"] else "", r["kernel"], r["zfs"]),
            f"{(r['size_bytes'] or 0) / 2**20:.0f} MiB",
            esc(r["built_at"]),
            f"{r['build_seconds']} s",
        )
    console.print(t)
    if not any(r["current"] for r in rows):
        console.print("the recipe changed since: run [bold]scenario image build[/]")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    import shutil

    keep = image.load_recipe().hash
    console = ui.console()
    d = paths.images_dir()
    freed = 0
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        if p.name.startswith(keep):
            continue
        size = (
            sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            if p.is_dir()
            else p.stat().st_size
        )
        freed += size
        console.print(
            f"{'would remove' if args.dry_run else 'removing'} {p} ({size / 2**20:.0f} MiB)",
            markup=False,
        )
        if args.dry_run:
            continue
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    console.print(
        f"{'would free' if args.dry_run else 'freed'} {freed / 2**20:.0f} MiB; kept {keep}"
    )
    return 0
