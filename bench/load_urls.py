"""URLs of the load benchmark's server: the example project's, and ``GET /plain/<uuid>/``, a
plain DRF view that answers one conversation's uuid, title and ``last_seq`` from one indexed
read (the unique ``uuid`` index), the yardstick the API's endpoints are measured beside."""

from typing import Any

from django.urls import path
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentmemory.models import Conversation
from project.urls import urlpatterns as project_urls


class PlainConversationView(APIView):
    """One of the caller's conversations by uuid: one indexed read (after authentication)."""

    def get(self, request: Request, uuid: Any) -> Response:
        row = (
            Conversation.objects.filter(uuid=uuid, owner=request.user)
            .values("uuid", "title", "last_seq")
            .first()
        )
        if row is None:
            raise NotFound
        return Response(row)


urlpatterns = [path("plain/<uuid:uuid>/", PlainConversationView.as_view()), *project_urls]
