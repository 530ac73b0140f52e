#!/usr/bin/env python3
"""fio's blocks judged on the live filesystem after the job (``harness/model/fioverify.py``
judges them; this is the guest's entry point, rule 12 of docs/verdicts.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from ..model import contract
from ..model.fioverify import verify


def main(argv: Sequence[str] | None = None) -> int:
    """``fioverify.py ROOT ORACLE MARK``: the report, a ``contract.FioPremise`` (the
    recorder's check of the oracle's premise on the live filesystem)."""
    root, path, mark = sys.argv[1:] if argv is None else argv
    with open(path) as f:
        oracle = json.load(f)
    premise: contract.FioPremise = contract.FioPremise(verdict=verify(root, oracle, mark))
    sys.stdout.write(premise.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
