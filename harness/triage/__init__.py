"""Triage: from a failing crash state to what it is made of (issue 24). ``blocks``: what
each write of a state's log is on the filesystem, read from the image with the
filesystem's own userspace tools, never the host kernel."""
