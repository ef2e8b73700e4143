"""deepvm's command line: `main` (the typer app, errors as one line and an exit code), `commands/` (one
module per command group), `render/` (records to screen and JSON) and `ui/` (console, flags, config file,
cluster choice, reporters)."""
