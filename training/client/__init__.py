"""Runs only on the user's machine: the managed-job client and `deepvm profile` (see training/__init__.py)."""
