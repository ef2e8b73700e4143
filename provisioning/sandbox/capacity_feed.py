"""The rule of the sandbox's capacity schedule that `deepvm chaos --trace` keeps for one zone's Spot market.

simulation/chaos_capacity.py says what is free in the zone at each sample of a capacity trace; this puts it
in force on the running sandbox's EC2 (provisioning/sandbox/realism.py) as one rule for every Spot type of the
zone (the trace stands for all of them, as in the simulator), the newest first so that it decides for the
pool, the user's other rules kept. Putting a schedule in force counts every rule's launches afresh
(realism_moto.ServerState.configure): the replay gives the free count anew at each sample, so its own rule
needs no memory, and the user's rules start again as `deepvm sandbox capacity` would set them.
"""

from __future__ import annotations

from dataclasses import replace

from provisioning.sandbox.realism import CapacityRule, RealismControl


class TraceCapacity:
    """`set_free(n)`: the zone's Spot pools launch n more at most; `clear()`: the rule is gone."""

    def __init__(self, control: RealismControl, zone: str) -> None:
        self.control, self.zone = control, zone
        self.rule: CapacityRule | None = None  # the one in force, as set

    def set_free(self, nodes: int) -> None:
        self._put(CapacityRule(zone=self.zone, instance_type="*", market="spot", available=nodes))

    def clear(self) -> None:
        if self.rule is not None:  # nothing of ours is set: the user's rules stay untouched (their counts too)
            self._put(None)

    def _put(self, rule: CapacityRule | None) -> None:
        settings = self.control.settings()
        others = tuple(r for r in settings.capacity if r != self.rule)
        self.control.set(replace(settings, capacity=others if rule is None else (rule, *others)))
        self.rule = rule
