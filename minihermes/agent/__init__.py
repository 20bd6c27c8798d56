"""The agent application: its actors on the MiniHermes runtime (see docs/agent.md)."""
