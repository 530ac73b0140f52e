"""Where the lab keeps things: the image cache outside the repo, results inside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """``$CRASHLAB_CACHE`` or ``$XDG_CACHE_HOME/crashlab`` (default ``~/.cache/crashlab``)."""
    if env := os.environ.get("CRASHLAB_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crashlab"


def images_dir() -> Path:
    return cache_dir() / "images"


def recipe_dir() -> Path:
    return REPO / "images"


def scenarios_dir() -> Path:
    return Path(os.environ.get("CRASHLAB_SCENARIOS", REPO / "scenarios"))


def results_dir() -> Path:
    return Path(os.environ.get("CRASHLAB_RESULTS", REPO / "results"))


def default_db() -> Path:
    return results_dir() / "lab.sqlite"


def work_dir() -> Path:
    """Scratch space for crash images and guest disks: large, sparse, disposable."""
    d = Path(os.environ.get("CRASHLAB_WORK", cache_dir() / "work"))
    d.mkdir(parents=True, exist_ok=True)
    return d
