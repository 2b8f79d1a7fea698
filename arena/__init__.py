"""Orchestration: CLI, config, task sources, the LangGraph episode graph, the session runner."""
