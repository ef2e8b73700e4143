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

What the controller feeds it (once it runs on the head; issue 22's node pool holds every count below):
- now_s: its clock; zone: where the cluster is; zones: the region's zones with a subnet of the cluster's VPC;
- plan: the cluster's plan groups; types: TypeFacts of every type named (catalog: TFLOPS, scaling curve);
- holdings: per (pool, role, stand-in): nodes READY or AT_RISK (ready) and BOUGHT (coming);
- offers: the plan's types (and the zone's other GPU types) per zone and market, at the prices the plan
  was made with or fresher ones; capacity_seen from GetSpotPlacementScores where it asks;
- refusals: per pool, the InsufficientInstanceCapacity answers of CreateFleet (Errors[]) in a row, with the
  first's and the last's time; a pool that gave what was asked is dropped from it;
- progress: the work left in PFLOP (steps left x the PFLOP of a step, from the plan's rate and the job's
  step time) and the rate measured over the last attempt (PFLOP per hour);
- limits: the plan's cap, HeadJob.limits (deadline from the job's start, budget, fallback cap), and the
  cost so far (the job record's); timing: the replacement delay and the relaunch it measures.
What it acts on: each Order is a Buy of the node pool with a zone, a type and a market (stand_in marks a
stand-in; retires: that many stand-ins go AT_RISK, drained one per node of the order joined); each Retire moves
that many nodes of the pool to AT_RISK, drained at the next launch; MOVE buys the orders in the new zone
and marks every node of the old one AT_RISK; STOP is the job's stop with a checkpoint (resumable);
check_at_s is a timer. It asks again at once after acting, at every event (a notice, a loss, a node ready,
a refusal), at check_at_s, and when the measured rate moves (the simulator's rate changes only at events);
every decision's reason goes to the job's log, for `deepvm logs` and `status`.
"""
