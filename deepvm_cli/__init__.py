"""deepvm_cli."""
