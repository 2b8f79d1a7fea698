"""Roles (solver, critic, teacher) and the model backends (policies) they call."""
