"""URL configuration of the example project: home page, admin, API, API schema and docs
(``SPECTACULAR_SETTINGS`` in the settings title the schema and serve the viewers offline)."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

api_patterns = [path("api/", include("agentmemory.api.urls"))]

urlpatterns = [
    path("", TemplateView.as_view(template_name="index.html"), name="home"),
    path("admin/", admin.site.urls),
    # The schema documents the agentmemory endpoints only (not itself, not the log-in pages).
    path(
        "api/schema/",
        SpectacularAPIView.as_view(patterns=api_patterns),
        name="schema",
    ),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    # The page without the Google Fonts links of drf-spectacular's template (offline docs).
    path(
        "api/redoc/",
        SpectacularRedocView.as_view(url_name="schema", template_name="agentmemory/redoc.html"),
        name="redoc",
    ),
    *api_patterns,
    # Log-in and log-out pages for DRF's browsable API.
    path("api-auth/", include("rest_framework.urls")),
]
