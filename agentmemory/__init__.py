"""agentmemory: persistent memory for LLM agents, as a reusable Django app."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: the installed distribution's version; ``pyproject.toml`` is the only place it is written
    __version__ = version("django-agentmemory")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
