"""Runs on the cluster's nodes, started over SSH by the controller or by mpirun (see training/__init__.py)."""
