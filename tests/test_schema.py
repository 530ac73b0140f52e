"""``scenario schema``: the JSON Schema editors check files with comes from the models
that validate them, accepts every shipped file, rejects what the loader rejects, and
docs/schema/ is up to date."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from harness import paths
from harness.config import campaign, census, scenario, schema
from harness.errors import InputError

SCENARIOS = sorted((paths.REPO / "scenarios").glob("*.toml"))
# campaigns/census.toml sits beside the campaigns it counts but is a file of its own kind.
CENSUS = paths.REPO / "campaigns" / "census.toml"
CAMPAIGNS = sorted(p for p in (paths.REPO / "campaigns").glob("*.toml") if p != CENSUS)


def test_docs_schema_is_up_to_date() -> None:
    for name, s in schema.files().items():
        on_disk = json.loads((paths.REPO / "docs" / "schema" / name).read_text())
        assert on_disk == json.loads(json.dumps(s)), f"run: scenario schema --write ({name})"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_passes_the_schema_and_the_loader(path: Path) -> None:
    jsonschema.validate(tomllib.loads(path.read_text()), schema.scenario_schema())
    scenario.load(path)


@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.stem)
def test_every_shipped_campaign_passes_the_schema_and_the_loader(path: Path) -> None:
    jsonschema.validate(tomllib.loads(path.read_text()), schema.schema("campaign"))
    assert campaign.load(path).elements


def test_the_census_passes_its_schema_and_the_loader() -> None:
    jsonschema.validate(tomllib.loads(CENSUS.read_text()), schema.schema("census"))
    assert census.load(CENSUS).fixes
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"fix": [{"reach": "reachable"}]}, schema.schema("census"))


@pytest.mark.parametrize(
    "text",
    [
        'description = "x"\n[fs]\ntype = "ext5"\n',
        'description = "x"\n[fs]\ntype = "ext4"\ncolour = "red"\n',
        'description = "x"\n[fs]\ntype = "ext4"\n[[crash.states]]\nkind = "sometimes"\n',
        'kind = "zfs"\ndescription = "x"\nlayout = "raidz9"\n',
    ],
)
def test_schema_and_loader_reject_the_same_typos(tmp_path: Path, text: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(tomllib.loads(text), schema.scenario_schema())
    p = tmp_path / "t.toml"
    p.write_text(text)
    with pytest.raises(InputError):
        scenario.load(p)
