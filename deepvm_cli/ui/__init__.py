"""The terminal pieces every command shares: the console (the only place that prints), flag rules and
their ranges, the config file and which cluster a command takes, progress reporters for cloud work and
for a job's events."""
