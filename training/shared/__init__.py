"""Records, protocols and SSH that the user's machine and the cluster both use (see training/__init__.py)."""
