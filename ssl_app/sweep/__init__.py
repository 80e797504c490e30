"""``python -m ssl_app.sweep``: many runs of one experiment (a grid of options × seeds, or a named plan),
launched as local processes or a SLURM job array; what a run still needs is read from its folder.

``command``: the command line; ``grid``: the runs a grid or a plan stands for (``plans``: the named
plans); ``preflight``: checks before anything starts; ``stages``: what both launchers share (a run's
stages, launching one, when one is done); ``local`` and ``slurm``: the launchers; ``estimate``: device-hours.
"""
