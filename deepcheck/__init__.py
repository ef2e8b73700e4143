"""deepcheck."""
