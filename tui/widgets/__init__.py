"""Widgets of the TUI."""
