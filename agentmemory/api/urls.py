"""URLs of the API: ``path("api/", include("agentmemory.api.urls"))`` in the host URLconf.

Names (namespace ``agentmemory``): ``conversation-list``, ``conversation-detail``,
``conversation-context``, ``conversation-messages-list``, ``conversation-summaries-list``,
``fact-list``, ``fact-detail``, ``search``, ``model-calls-list``, ``model-calls-detail``,
``model-calls-window``, ``model-calls-usage``, ``usage``.
"""

from django.urls import path
from rest_framework.routers import APIRootView, DefaultRouter

from agentmemory.api.calls import ModelCallViewSet, UsageView
from agentmemory.api.views import (
    UUID_REGEX,
    AppAPIView,
    ConversationViewSet,
    FactViewSet,
    MessageViewSet,
    SearchView,
    SummaryViewSet,
)

app_name = "agentmemory"


class _RootView(AppAPIView, APIRootView):  # type: ignore[misc]
    """The API root: links to the resource lists, with the API's permissions and error shape."""

    operation_prefix = "root"
    schema = None  # left out of the OpenAPI schema, as DRF's root view is


class _Router(DefaultRouter):
    include_format_suffixes = False
    APIRootView = _RootView


router = _Router()
router.register("conversations", ConversationViewSet, basename="conversation")
router.register(
    rf"conversations/(?P<conversation_uuid>{UUID_REGEX})/messages",
    MessageViewSet,
    basename="conversation-messages",
)
router.register(
    rf"conversations/(?P<conversation_uuid>{UUID_REGEX})/summaries",
    SummaryViewSet,
    basename="conversation-summaries",
)
router.register(
    rf"conversations/(?P<conversation_uuid>{UUID_REGEX})/model-calls",
    ModelCallViewSet,
    basename="model-calls",
)

router.register("facts", FactViewSet, basename="fact")

urlpatterns = [
    *router.urls,
    path("search/", SearchView.as_view(), name="search"),
    path("usage/", UsageView.as_view(), name="usage"),
]
