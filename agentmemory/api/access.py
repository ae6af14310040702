"""Who may call the API and how often: permissions, throttles, renderers and the data scope.

- Authentication is the host's ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]`` (DRF's
  own default: session and HTTP Basic).
- Permissions are the host's ``REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]`` when the host
  sets that key; when it does not, DRF's default would be ``AllowAny``, and the API uses
  ``IsAuthenticated`` instead. Whatever the permissions allow, the data is scoped to the
  requesting user: an anonymous request sees nothing and cannot write.
- Throttles are the host's ``DEFAULT_THROTTLE_CLASSES`` plus one scope per endpoint family
  (``agentmemory.conversations``, ``agentmemory.messages``, ``agentmemory.context``,
  ``agentmemory.facts``, ``agentmemory.search``), limited only when the host gives the scope a
  rate in ``DEFAULT_THROTTLE_RATES``.
- Renderers are the host's ``DEFAULT_RENDERER_CLASSES``: DRF's ``?format=json`` /
  ``?format=api`` choose among them. ``?format=openai`` (the message format parameter of
  earlier versions) is a JSON renderer named ``openai``, so it keeps working beside them.

Each of these is a DRF class attribute of the views (``permission_classes``,
``throttle_classes``, ``renderer_classes``, and ``pagination_class``), read from the settings
above each time a request reads it (``FromSettings``). A host that wants other classes for one
view subclasses it and sets the attribute, as with any DRF view (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404
from rest_framework.exceptions import NotAuthenticated
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle

from agentmemory.conf import app_settings

__all__ = [
    "THROTTLE_SCOPES",
    "AppScopedRateThrottle",
    "FromSettings",
    "OpenAIFormatRenderer",
    "permission_classes",
    "renderer_classes",
    "request_owner",
    "staff_sees_all",
    "throttle_classes",
]

#: throttle scopes of the API, by endpoint family
THROTTLE_SCOPES = (
    "agentmemory.conversations",
    "agentmemory.messages",
    "agentmemory.context",
    "agentmemory.facts",
    "agentmemory.search",
)


def permission_classes() -> list[type[BasePermission]]:
    """The host's ``DEFAULT_PERMISSION_CLASSES`` when its ``REST_FRAMEWORK`` setting names
    them (even as an empty list), else ``[IsAuthenticated]``: DRF's built-in default,
    ``AllowAny``, is never what a memory store of private conversations wants."""
    if "DEFAULT_PERMISSION_CLASSES" in api_settings.user_settings:
        return list(api_settings.DEFAULT_PERMISSION_CLASSES)
    return [IsAuthenticated]


def request_owner(request: Request) -> Any:
    """The user a request reads and writes for.

    Raises:
        NotAuthenticated: an anonymous request (the host's permissions let it through, but it
            owns no data).
    """
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        raise NotAuthenticated()
    return user


def staff_sees_all(user: Any) -> bool:
    """Whether ``user`` reaches every conversation through the API: an active staff user when
    ``AGENTMEMORY["API_STAFF_SEES_ALL_CONVERSATIONS"]`` is on."""
    return bool(
        app_settings().API_STAFF_SEES_ALL_CONVERSATIONS
        and getattr(user, "is_authenticated", False)
        and getattr(user, "is_active", False)
        and getattr(user, "is_staff", False)
    )


class AppScopedRateThrottle(ScopedRateThrottle):
    """DRF's ``ScopedRateThrottle`` that lets a request through when the host set no rate for
    the view's scope (DRF's raises ``ImproperlyConfigured``), and reads the rates when a
    request comes in rather than at import."""

    def __init__(self) -> None:
        # ScopedRateThrottle defers reading the rate to allow_request.
        pass

    def allow_request(self, request: Request, view: Any) -> bool:
        scope = getattr(view, self.scope_attr, None)
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if not scope or not rates.get(scope):
            return True
        self.THROTTLE_RATES = rates
        return bool(super().allow_request(request, view))


def throttle_classes() -> list[type[BaseThrottle]]:
    """The host's ``DEFAULT_THROTTLE_CLASSES`` with ``ScopedRateThrottle`` replaced by
    ``AppScopedRateThrottle``, which is added when the host lists none."""
    classes = [
        AppScopedRateThrottle if cls is ScopedRateThrottle else cls
        for cls in api_settings.DEFAULT_THROTTLE_CLASSES
    ]
    if AppScopedRateThrottle not in classes:
        classes.append(AppScopedRateThrottle)
    return classes


def throttles() -> list[BaseThrottle]:
    """Instances of ``throttle_classes()``."""
    return [cls() for cls in throttle_classes()]


def renderer_classes() -> list[type[BaseRenderer]]:
    """The host's ``DEFAULT_RENDERER_CLASSES``."""
    return list(api_settings.DEFAULT_RENDERER_CLASSES)


class FromSettings:
    """A view class attribute whose value is ``read()``, called each time the attribute is
    read, so that it follows the host's ``REST_FRAMEWORK`` setting as it is when a request
    comes in (DRF's own defaults are read once, at import, and miss ``override_settings``).

    It only provides a default: a subclass that sets the attribute (``permission_classes =
    [IsAdminUser]``), or an ``@action(permission_classes=...)``, replaces it as for any DRF
    view.
    """

    def __init__(self, read: Callable[[], list[Any]]) -> None:
        self.read = read

    def __get__(self, instance: object, owner: type | None = None) -> list[Any]:
        return self.read()


class OpenAIFormatRenderer(JSONRenderer):
    """JSON, selected by ``?format=openai`` on the actions that take ``message_format``
    (``AppAPIView.message_shape_actions``), where it means ``message_format=openai`` when that
    parameter is absent; a renderer, so that DRF's ``?format=`` stays the renderer choice."""

    format = "openai"


class StrictContentNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, except that an empty ``?format=`` is refused like any other
    value naming no renderer (404, DRF's answer to an unknown format), instead of being
    taken as no format at all: the schema lists the formats, and ``""`` is none of them."""

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        name = self.settings.URL_FORMAT_OVERRIDE
        if not format_suffix and name and request.query_params.get(name) == "":
            raise Http404("No renderer for an empty format.")
        return super().select_renderer(request, renderers, format_suffix)
