"""deepvm simulate: what a plan costs and how long it takes once its Spot nodes disappear.

`trace` is the one internal form every interruption source is normalised into (real traces, a user's
file, an interruption-rate band); the engine reads nothing else.
"""
