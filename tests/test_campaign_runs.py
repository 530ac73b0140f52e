"""Which run a campaign element is done with (issue 48, found by the week-long soak):
done only with a run that judged every item, and only with a run it began itself.

Before, an element whose run left items the lab failed to judge (a full cache made every
state harness_error) was marked done; and the next night's campaign, finding that run
unfinished with the same scenario, parameters and seed, resumed it, so two elements of
two nights claimed one run and its verdicts were judged again. Here on the lifecycle
with a kind of the test's own (as tests/test_registry.py's toy): its item ``i1`` is a
harness_error while a file exists.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.campaign.runner import ElementStatus, Engine
from harness.config import campaign as config_campaign
from harness.experiments import lifecycle, registry
from harness.store.db import RunEnv, Store
from tests.test_registry import TOY_KIND, write_toy

# The toy of tests/test_registry.py, with one item the lab fails while a file exists.
_TOY_CHECK = 'yield it, "repaired" if n == 0 else "data_loss" if n % 2 == 0 else "consistent"'
assert _TOY_CHECK in TOY_KIND
FLAKY_KIND = (
    TOY_KIND.replace(
        _TOY_CHECK, 'yield it, "harness_error" if n == 1 and BROKEN.exists() else "consistent"'
    )
    .replace("from types import", "from pathlib import Path\nfrom types import", 1)
    .replace("\nclass Toy(", '\nBROKEN = Path(__file__).parent / "BROKEN"\n\n\nclass Toy(')
)


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The flaky kind in a folder of its own, failing until the returned file goes."""
    pkg = write_toy(tmp_path, monkeypatch, FLAKY_KIND)
    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img, **_: RunEnv(image_hash=img.hash))
    forget_toy()
    (pkg / "BROKEN").touch()
    yield pkg / "BROKEN"
    forget_toy()


def forget_toy() -> None:
    """The kind imported anew: another test's toy (or this one's, of another folder) may
    be in sys.modules under the same name."""
    for name in [m for m in sys.modules if m.startswith("harness.experiments.toy")]:
        del sys.modules[name]
    registry.kinds.cache_clear()


def night(tmp_path: Path, *, new: bool = False) -> tuple[ElementStatus, str | None, str]:
    """One campaign of one element on the flaky kind: (its status, its run, the run's)."""
    (tmp_path / "flaky.toml").write_text('description = "flaky"\nkind = "toy"\nitems = 3\n')
    camp = tmp_path / "camp.toml"
    camp.write_text(f'max_failures = 2\n[[run]]\nscenario = "{tmp_path / "flaky.toml"}"\n')
    report = Engine(config_campaign.load(camp), tmp_path / "lab.sqlite").run(new=new)
    (row,) = report.rows
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        assert st.counted_twice(report.campaign_id) == []
        status = st.run(row.run_id).status if row.run_id else ""
    return row.status, row.run_id, str(status)


def test_an_element_is_done_only_with_a_finished_run_which_its_retry_resumes(
    tmp_path: Path, broken: Path
) -> None:
    status, run, run_status = night(tmp_path)
    # Each attempt resumed the element's own run, which stays unfinished: quarantined.
    assert (status, run_status) == (ElementStatus.QUARANTINED, "failed"), run_status
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        assert len(st.runs()) == 1
    broken.unlink()
    # The next night: a campaign of its own, a run of its own, done.
    status2, run2, run_status2 = night(tmp_path, new=True)
    assert (status2, run_status2) == (ElementStatus.DONE, "done") and run2 != run
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        assert st.run(run).status == "failed"  # the first night's, untouched
        outcomes = {o["item"]: o["outcome"] for o in st.observations(run2)}
    assert outcomes == {"i0": "consistent", "i1": "consistent", "i2": "consistent"}


def test_a_failed_attempt_is_resumed_by_the_same_campaign(
    tmp_path: Path, broken: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str | None] = []
    real = lifecycle.execute

    def execute(sc: object, **kw: object) -> lifecycle.Report:
        calls.append(kw.get("only"))  # type: ignore[arg-type]
        if len(calls) == 2:
            broken.unlink()  # the cache has room again
        return real(sc, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lifecycle, "execute", execute)
    status, run, run_status = night(tmp_path)
    assert (status, run_status) == (ElementStatus.DONE, "done")
    assert calls == [None, run]  # the retry named the first attempt's run, and resumed it
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        assert len(st.runs()) == 1
