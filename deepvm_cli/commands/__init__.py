"""One module per command group; each has a `register(app)` that deepvm_cli.main calls. A command parses its
flags, calls one function of the domain (provisioning, training, simulation) and hands the records it gets
back to `render/`; it imports `ui/`, `render/` and the domain, never another command, so changing one
command cannot break another."""
