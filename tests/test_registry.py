"""Experiment kinds are one folder and one record (harness/experiments/registry.py).

The record of every kind names its settings model, run kind, experiments, summary bodies
and (through each experiment's ``expected``) its counting rule; and a new kind written
into a folder of its own -- nothing else touched -- loads, validates, has a JSON Schema,
runs on the lifecycle and prints its summary.
"""

from __future__ import annotations

import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

import harness.experiments
from harness.config import scenario, schema
from harness.config.base import ScenarioBase
from harness.errors import InputError
from harness.experiments import lifecycle, registry
from harness.experiments.summary import print_summary
from harness.store.db import RunEnv, Store


def test_every_kind_names_its_parts() -> None:
    kinds = registry.kinds()
    assert set(kinds) == {"check-log", "crash", "faults", "recovery", "search", "workload", "zfs"}
    for name, k in kinds.items():
        assert k.name == name
        assert issubclass(k.settings, ScenarioBase)
        # The model's `kind` key takes exactly the record's name.
        assert typing.get_args(k.settings.model_fields["kind"].annotation) == (name,)
        assert k.run_kind and k.settable and k.experiments
        for v in k.experiments.values():
            assert issubclass(v.experiment, lifecycle.Experiment)
            assert callable(v.body) and callable(v.experiment.expected)
            assert registry.body(v.experiment) is v.body
            assert registry.run_kind(v.experiment) == k.run_kind


def test_every_scenario_file_has_a_registered_experiment() -> None:
    good, bad = scenario.survey()
    assert not bad
    for sc in good:
        kind, cls = registry.experiment(sc)
        assert isinstance(sc, kind.settings), sc.name
        assert cls is kind.experiments[sc.experiment_kind].experiment


def test_an_unknown_kind_is_bad_input_naming_the_known(tmp_path: Path) -> None:
    f = tmp_path / "odd.toml"
    f.write_text('description = "x"\nkind = "crsh"\n')
    with pytest.raises(InputError) as e:
        scenario.load(f)
    assert str(f) in e.value.message and "'crsh'" in e.value.message
    assert "crash" in (e.value.hint or "")


TOY_SETTINGS = """
from typing import Literal

from pydantic import Field

from harness.config import settings
from harness.config.base import ScenarioBase


class ToyScenario(ScenarioBase):
    kind: Literal["toy"]
    items: int = Field(2, ge=1, description="how many items")

    def catalogue_row(self) -> tuple[str, str, str, str]:
        return ("toy", "-", f"{self.items} items", "-")


SETTABLE = settings.settable(ToyScenario)
"""

TOY_KIND = '''
from types import SimpleNamespace

from harness.experiments import lifecycle
from harness.experiments.registry import Kind, Variant
from harness.experiments.toy import settings


class Toy(lifecycle.Observed):
    """Every even item loses data; item 0 is repaired, which this kind expects."""

    def prepare(self) -> None:
        pass

    def items(self):
        return [SimpleNamespace(id=f"i{n}") for n in range(self.sc.items)]

    def check(self, todo):
        for it in todo:
            n = int(it.id[1:])
            yield it, "repaired" if n == 0 else "data_loss" if n % 2 == 0 else "consistent"

    def commit(self, item, result) -> None:
        self.run.store.record_observation(self.run.run_id, item.id, {}, {}, result)

    def expected(self, item) -> bool:
        return item.outcome == "repaired"


def body(console, r) -> None:
    console.print(f"toy body: {r.items} items")


KIND = Kind(
    name="toy",
    settings=settings.ToyScenario,
    run_kind="toy",
    experiments={"toy": Variant(Toy, body)},
    settable=settings.SETTABLE,
)
'''


def write_toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> Path:
    """The toy kind (its settings, ``kind`` as its kind.py) written into a folder of its
    own, found beside the lab's; the folder."""
    pkg = tmp_path / "kinds" / "toy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text(textwrap.dedent(TOY_SETTINGS))
    (pkg / "kind.py").write_text(textwrap.dedent(kind))
    monkeypatch.setattr(
        harness.experiments, "__path__", [*harness.experiments.__path__, str(pkg.parent)]
    )
    return pkg


@pytest.fixture
def toy_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A kind written into a folder of its own, found beside the lab's."""
    write_toy(tmp_path, monkeypatch, TOY_KIND)
    registry.kinds.cache_clear()
    yield tmp_path
    registry.kinds.cache_clear()


def test_a_new_kind_is_one_folder(toy_kind: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = toy_kind / "toy-run.toml"
    f.write_text('description = "a toy"\nkind = "toy"\nitems = 4\n')
    assert "toy" in schema.kinds()
    assert "ToyScenario" in str(schema.scenario_schema())
    sc = scenario.load(f, ["items=5"])
    assert sc.catalogue_row() == ("toy", "-", "5 items", "-")
    with pytest.raises(InputError) as e:
        scenario.load(f, ["itmes=3"])
    assert "items" in str(e.value.hint) + e.value.message

    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img, **_: RunEnv(image_hash=img.hash))
    db = toy_kind / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    # i0 repaired (expected by the kind's rule), i2 and i4 data_loss, i1 and i3 consistent
    assert r.status == 1 and r.account.findings == 2
    assert dict(r.account.expected) == {"repaired": 1}
    with Store.open(db, create=False) as st:
        (row,) = st.runs()
    assert row.kind == "toy" and row.exit_status == 1
    console = Console(record=True, width=200)
    print_summary(console, r)
    assert "toy body: 5 items" in console.export_text()
