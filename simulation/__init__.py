"""deepvm simulate: what a plan costs and how long it takes once its Spot nodes disappear.

`trace` is the one internal form every interruption source is normalised into (real traces, a user's
file, an interruption-rate band; `traces` reads them); the engine reads nothing else.

From a plan to an answer:
    cluster    a plan as the simulator sees it (groups, prices, FLOPS, K_min(N))
    capacity   a capacity series as up/down windows per node slot
    draws      every random number, addressed by (run, slot, occupant)
    recovery   what an interruption costs (deepvm's measured figures) and the workload
    case       one question: cluster + traces + policy rules + workload
    engine     all runs at once, vectorised (numpy); reference: one run as a plain loop, same numbers
    policies   the plans and rules compared; compare: all of them on the same runs
    report     quantiles and the --json document (deepvm_cli/render/simulate_plot.py draws the CDFs)
"""
