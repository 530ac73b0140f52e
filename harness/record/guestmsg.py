"""The host's side of the guest contract (``harness/model/contract.py``): a guest
program's answer read into its message, or the lab's failure that names the program,
the field and what it printed -- never a finding, never a traceback."""

from __future__ import annotations

from typing import TypeVar

from harness.errors import GuestMessageError
from harness.model.contract import ContractError, Message

M = TypeVar("M", bound=Message)


def read(kind: type[M], program: str, output: str) -> M:
    """``output`` (what ``program`` printed) as a ``kind``.

    :raise GuestMessageError: it is not JSON, or not a ``kind`` (exit 3).
    """
    try:
        return kind.from_json(output)
    except ContractError as e:
        raise GuestMessageError(program, e.field, e.reason, output) from None
