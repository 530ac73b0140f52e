"""Fault models: which crash states of a recorded log the lab materialises and checks.

``crashstates`` turns a parsed dm-log-writes log (``harness.logwrites``) into crash
states: a prefix of the log's entries, minus the writes a power failure could have lost
(``reorder``), or with one write persisted in part (``torn``). Generators are pure
functions of the log, their parameters and a seed, selected by scenario TOML specs such
as ``{kind="fua"}`` or ``{kind="reorder", max_states=64}``; ``harness.replay`` then
materialises the states incrementally.
"""
