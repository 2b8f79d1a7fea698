"""Terminal UI (Textual): browses sessions, rollouts and lessons. Screens arrive with the TUI issue."""
