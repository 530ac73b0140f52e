"""Disk fault models: what a damaged or failing disk does, as data the experiments apply.

* ``disk``: damage applied from the host to a guest's raw disk files -- zeros over a byte
  range or over a share of a disk (with or without the ZFS labels), random bit flips, a
  whole disk wiped; ``apply()`` returns exactly what it changed (the ZFS kind's scans).
* ``dm``: what a failing disk does to the I/O a filesystem sends it -- the dm-flakey
  tables (writes dropped or failed, reads failed, a byte of matching bios corrupted) and
  the dm-dust bad-block list the guest loads (the runtime-fault kind,
  ``harness/experiments/faults/``).

Both are records parsed from a scenario's ``[fault]`` table, and import nothing of the
harness (tests/test_layout.py). The lab's other faults live with what makes them
(README.md's layout table): a power failure's lost, reordered and torn writes are crash
states cut from a recorded log (``harness/replay/crashstates.py``, ``multicrash.py``); the
positive control's zeroed block needs the host's debugfs (``harness/replay/corrupt.py``);
a bug put back in a filesystem's code is a mutant kernel (``mutants/``,
``harness/kernel/mutant.py``).
"""
