"""Programs the host copies into the guest and runs there.

Each module here is a single stdlib-only script: it must not import the harness package,
because the guest has only a Python interpreter and the file itself.
"""
