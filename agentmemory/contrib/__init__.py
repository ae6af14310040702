"""Optional add-ons of agentmemory, each an app of its own that you add to ``INSTALLED_APPS``."""
