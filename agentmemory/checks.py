"""System checks for the ``AGENTMEMORY`` settings."""
