"""The agent application: the seeds' actors on the MiniHermes runtime (see docs/agent.md)."""
