"""Optional add-ons of agentmemory, each with its own extra (see pyproject.toml): apps that you
add to ``INSTALLED_APPS`` (``pgvector``) and modules you call (``prometheus``)."""
