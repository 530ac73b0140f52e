"""``scenario results table journal``: what the kernel's journal recovery did with each
crash state at its guest mount (seed 004's journal checksumming), read from the kernel's
own messages, which the guest check keeps at the end of its output
(``checkstate.py``: ``kernel:`` lines of jbd2 and ext4).

- ``refused``: jbd2 met a transaction it would not replay -- a bad checksum ("Invalid
  checksum recovering", "journal transaction N ... is corrupt"), or recovery failed;
- ``replayed``: ext4 says "recovery complete";
- ``none``: the journal was clean, or the filesystem said nothing about it.

Grouped by the run's mount options, it says what ``journal_checksum`` and
``journal_async_commit`` buy: ``scenario campaign run campaigns/journal-checksum.toml``.
"""

from __future__ import annotations

from harness.report import query

REFUSED = ("Invalid checksum", "is corrupt", "recovery failed", "error loading journal")
RECOVERY = (
    "CASE WHEN "
    + " OR ".join(f"o.output LIKE '%{w}%'" for w in REFUSED)
    + " THEN 'refused' WHEN o.output LIKE '%recovery complete%' THEN 'replayed'"
    " ELSE 'none' END"
)
_SOURCE = (
    "SELECT c.run_id, c.state_id, c.seconds, c.output, v.outcome FROM checks c"
    " JOIN verdicts v ON v.run_id = c.run_id AND v.state_id = c.state_id"
    " WHERE c.stage = 'guest'"
)

TABLE = query.TableKind(
    name="journal",
    help="journal recovery per crash state at its guest mount: replayed, refused, none",
    source=_SOURCE,
    fields={
        "recovery": RECOVERY,
        "generator": "(SELECT s.generator FROM crash_states s"
        " WHERE s.run_id = o.run_id AND s.id = o.state_id)",
    },
    value="seconds",
    counts_source=_SOURCE,
    default_by=("mount_options", "recovery"),
    empty_hint="no guest checks stored yet: `scenario run ext4-ordered-fsync`",
)
