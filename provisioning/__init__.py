"""What to rent and renting it, in rooms that import only downwards:

- `core/`: what every package uses (errors a user can cause, DEEPVM_HOME, atomic writes, bounded reading
  of user files and strict documents, the state database and its locks). Imports nothing of deepvm.
- `catalog/`: what each instance type is and costs where (the catalog model, its file formats, the
  built-in snapshot and its data, live `market/` sources, which catalog a command uses).
- `scaling/`: how a data-parallel job speeds up on n nodes (DeepVM's model, the fit, profile files).
- `planner/`: FLOPP, the overhead model and the exact MILP over the cluster shapes -> a Plan.
- `cloud/`: the provider alone: its typed contract (`types`), EC2 (`aws/`), and SSH to its instances.
- `sandbox/`: the local cloud (a moto server and real hosts) behind the same provider contract.
- `clusters/`: a recorded cluster above the provider: its handle, the store, its cost, the cloud it is
  on (`target`), its head, the plan `up` launches and the `up`/`status`/`down` lifecycle.
"""
