"""The recovery controller and what it drives: on the head node for a managed job, on the user's machine with
`--controller local` (see training/__init__.py)."""
