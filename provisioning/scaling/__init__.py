"""How a data-parallel job speeds up on n nodes: DeepVM's overhead model (`model`), fitting its logistic
curve to measured speed-ups (`fit`, scipy, loaded lazily), and the profile files `deepvm profile` writes
and `plan --profile` reads (`profile`)."""
