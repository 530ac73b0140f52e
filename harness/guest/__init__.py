"""The programs the guest runs: thin entry points over ``harness.model``.

Stdlib only and relative imports only: the host installs this package and ``model/``
into the guest as the package they are (``record/guestfiles.py``), with a launcher per
program (``GUEST_DIR/opgen.py`` runs ``harness.guest.opgen.main``). What a program prints
for the host, and what the host sends it, is a message of ``model/contract.py``.
"""
