"""How results look on the screen and in --json: each module takes the domain's records (a plan, a cluster
view, a job's progress, a simulation) and prints or returns them; none of them decides anything or asks
the cloud."""
