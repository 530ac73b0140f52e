"""fstests (xfstests) from the lab's side: a finding's workload as an fstests test
(``gen.py``) and fstests' ``./check`` run in a lab guest on a chosen kernel (``check.py``)."""
