"""URLs of the API: ``path("api/", include("agentmemory.api.urls"))`` in the host URLconf.

Names (namespace ``agentmemory``): ``conversation-list``, ``conversation-detail``,
``conversation-context``, ``conversation-messages-list``, ``conversation-summaries-list``,
``fact-list``, ``fact-detail``, ``search``, ``model-calls-list``, ``model-calls-detail``,
``model-calls-window``, ``model-calls-usage``, ``usage``.
"""

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseRedirectBase
from django.urls import Resolver404, path, re_path, resolve
from django.views.decorators.csrf import csrf_exempt
from rest_framework.routers import APIRootView, DefaultRouter

from agentmemory.api.calls import ModelCallViewSet, UsageView
from agentmemory.api.longterm import FactViewSet, SearchView
from agentmemory.api.views import (
    UUID_REGEX,
    AppAPIView,
    ConversationViewSet,
    MessageViewSet,
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


@csrf_exempt  # it changes nothing: a POST is sent on, with its body, to the URL with the slash
def without_trailing_slash(request: HttpRequest, rest: str) -> HttpResponse:
    """A path under the API's own prefixes that no other URL of the API matched.

    Without its trailing slash, and a URL of the API with it: ``308 Permanent Redirect`` to
    that URL (the method and the body go with a 308, where Django's ``APPEND_SLASH`` answers a
    POST with an HTML error page under ``DEBUG`` and a 301 otherwise, which clients follow
    with a GET). ``Location`` is the path as sent, escaped again (``%3F`` stays ``%3F``, never
    a query), with the slash and the query string. Anything else, with its slash or without:
    the API's JSON 404 (Django's is an HTML page)."""
    if not rest.endswith("/"):
        try:
            match = resolve(request.path_info + "/", urlconf=getattr(request, "urlconf", None))
        except Resolver404:
            match = None
        # with the slash it must be another URL than this catch-all, which takes any path
        if match is not None and match.func is not without_trailing_slash:
            location = request.get_full_path(force_append_slash=True)
            body = {"error": "trailing_slash", "detail": f"The API's URLs end in a slash: {location}"}
            return _PermanentRedirect(location, content=json.dumps(body), content_type="application/json")
    return JsonResponse({"error": "not_found", "detail": "No such URL in the API."}, status=404)


class _PermanentRedirect(HttpResponseRedirectBase):
    """308: the client repeats the request, method and body, at ``Location`` (RFC 9110)."""

    status_code = 308


urlpatterns = [
    *router.urls,
    path("search/", SearchView.as_view(), name="search"),
    path("usage/", UsageView.as_view(), name="usage"),
    # last: only what matched nothing above, and only under the API's own first segments, so
    # the host's URLs beside the API are never taken; any character, a line break included
    re_path(r"^(?P<rest>(?:conversations|facts|search|usage)(?:/[\s\S]*)?)\Z", without_trailing_slash),
]
