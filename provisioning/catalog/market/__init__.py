"""Market data: where instance types, prices and quotas come from.

One thin module per live AWS source (`instance_types`, `spot`, `ondemand`, `quotas`) over shared helpers
(`aws`, `cache`); `live` assembles them into a Catalog. `families` and `gpus` say which instance types
deepvm cares about and what their GPUs are worth; `handbook` builds the built-in snapshot and `summary`
turns any catalog into the rows `deepvm market` shows. Importing this package must stay cheap: nothing
here imports boto3 at module level except the live AWS modules, which `deepvm --offline` never loads.
"""
