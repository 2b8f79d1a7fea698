"""The training code of each objective; the registry of their names and specs is :mod:`arena.objectives`."""
