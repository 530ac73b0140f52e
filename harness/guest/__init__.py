"""Programs the host copies into the guest and runs there.

Each module here is a single stdlib-only script: it must not need the harness package,
because the guest has only a Python interpreter and the files of this folder. What a
program prints for the host, and what the host sends it, is a message of ``contract.py``
(programs take it from ``runner``, which imports it from beside itself in the guest and
as ``harness.guest.contract`` on the host, so both sides share one class).
"""
