"""The recovery ladder: what a job's cluster buys, releases or moves next when the Spot market changes, as
one pure decision (no clock, no cloud, no file), so that the controller on the head and `deepvm simulate`
run the same policy, not two copies of it.

    situation   what the ladder is told: the plan, the nodes held, the offers per (zone, type, market),
                the capacity refusals seen, the job's remaining work and rate, its deadline and budget
    decision    what it answers: a rung, the orders that carry it out, when to ask again, and why
    throughput  the planner's rate model for any set of nodes (PFLOP per hour)
    backoff     how long a pool that refused capacity is left alone (exponential, capped)
    deadline    Can't Be Late's safety net for a cluster: on-demand stand-ins as the deadline needs them
    moves       when moving the cluster to another zone pays, counting the move's own cost
    ladder      decide(situation): the rungs in order

It lives in provisioning (what to get) because it decides purchases from prices and capacity, and both
training.control (the head) and simulation import it; it imports nothing impure.
"""
