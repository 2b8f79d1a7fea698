"""Screens of the TUI: sessions, session, episode, lessons, adapters, notices and modals."""
