"""Optional add-ons of agentmemory, each with its own extra (see pyproject.toml): apps that you
add to ``INSTALLED_APPS`` (``pgvector``, ``langgraph``, ``mcp``) and modules you call
(``prometheus``, the framework integrations)."""
