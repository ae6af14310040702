"""URL configuration of the example project: home page, admin, API, API schema and docs."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

api_patterns = [path("api/", include("agentmemory.api.urls"))]

SCHEMA_SETTINGS = {
    "TITLE": "agentmemory API",
    "DESCRIPTION": "Conversations, messages and context windows of LLM agents. See docs/api.md.",
    "VERSION": "0.1.0",
}

urlpatterns = [
    path("", TemplateView.as_view(template_name="index.html"), name="home"),
    path("admin/", admin.site.urls),
    # The schema documents the agentmemory endpoints only (not itself, not the log-in pages).
    path(
        "api/schema/",
        SpectacularAPIView.as_view(patterns=api_patterns, custom_settings=SCHEMA_SETTINGS),
        name="schema",
    ),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    *api_patterns,
    # Log-in and log-out pages for DRF's browsable API.
    path("api-auth/", include("rest_framework.urls")),
]
