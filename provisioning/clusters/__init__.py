"""A recorded cluster, above the provider: the handle a command opens once (`handle`), the SQLite tables
it lives in (`store`), what it cost (`cost`), which cloud it runs on (`target`: AWS or the sandbox), which
node is its head (`head`), the plan `up` launches (`plan_choice`), and `up`/`status`/`down` themselves
(`lifecycle`)."""
