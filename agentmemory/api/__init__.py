"""The REST API of agentmemory (Django REST framework): conversations, messages, context windows.

Mount it in the host project's URLconf with ``path("api/", include("agentmemory.api.urls"))``;
see docs/api.md for the endpoints and their request and response shapes.
"""
