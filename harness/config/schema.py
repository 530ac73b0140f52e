"""JSON Schema of the lab's files, from the same models that validate them, for editors
(taplo / "Even Better TOML": a ``#:schema`` first line in a scenario file) and for
``scenario schema``. ``docs/schema/*.json`` are these, written by ``scenario schema
--write`` and held up to date by a test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, TypeAdapter

from harness import paths
from harness.config.campaign import CampaignFile
from harness.config.census import CensusFile

# Set by the loader from the file, never written in it.
_INTERNAL = ("name", "path", "extends", "overrides")


def kinds() -> dict[str, type[BaseModel]]:
    """Every file kind with a schema: each experiment kind's scenarios (from its record in
    ``harness/experiments/registry.py``), campaigns and the census."""
    from harness.experiments.registry import kinds as registered

    out: dict[str, type[BaseModel]] = {n: k.settings for n, k in registered().items()}
    return {**out, "campaign": CampaignFile, "census": CensusFile}


# Kinds that are files of their own, not scenarios: no ``extends``, required keys kept.
_FILES: dict[str, type[BaseModel]] = {"campaign": CampaignFile, "census": CensusFile}


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind of file (``crash``, ``zfs``, ``campaign``, ``census``)."""
    what = "file" if kind in _FILES else "scenario"
    return _schema([kinds()[kind]], f"crashlab {kind} {what}")


def scenario_schema() -> dict[str, Any]:
    """Both scenario kinds in one schema: a file must fit one of them."""
    models = [m for n, m in kinds().items() if n not in _FILES]
    return _schema(models, "crashlab scenario")


def _schema(models: list[type[BaseModel]], title: str) -> dict[str, Any]:
    """One pass over ``models``, so pydantic keeps same-named definitions apart. Nothing
    in a scenario is required but the tags of unions (``kind`` of a crash state): a file
    that ``extends`` another gets the rest from its parent, which only the loader sees."""
    union: Any = models[0] if len(models) == 1 else Union[tuple(models)]  # noqa: UP007
    s = TypeAdapter(union).json_schema(by_alias=True)
    defs = s.setdefault("$defs", {})
    tops = [s] if len(models) == 1 else [defs[r["$ref"].split("/")[-1]] for r in s["anyOf"]]
    for top in tops:
        props = top.get("properties", {})
        for key in _INTERNAL:
            props.pop(key, None)
        top["required"] = [r for r in top.get("required", []) if r not in _INTERNAL]
    if not (len(models) == 1 and models[0] in _FILES.values()):
        for top in tops:
            top["properties"]["extends"] = {
                "type": "string",
                "description": "a scenario to start from",
            }
        for d in defs.values():
            props = d.get("properties", {})
            if d in tops or "const" not in props.get("kind", {}):
                # A workload whose only required key is its ``type`` keeps it: without
                # the tag, a file that sets only ``ops`` would fit it and the op generator.
                tag = "const" in props.get("type", {}) and d.get("required") == ["type"]
                d.pop("required", None)
                if tag:
                    d["required"] = ["type"]
        s.pop("required", None)
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = title
    return s


def files() -> dict[str, dict[str, Any]]:
    """What ``docs/schema/`` holds: file name -> schema."""
    return {
        "scenario.json": scenario_schema(),
        "campaign.json": schema("campaign"),
        "census.json": schema("census"),
    }


def write(directory: Path | None = None) -> list[Path]:
    d = directory or paths.REPO / "docs" / "schema"
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for name, s in files().items():
        p = d / name
        p.write_text(json.dumps(s, indent=2, sort_keys=True) + "\n")
        out.append(p)
    return out
