"""The host project's URLs: the admin and the agentmemory API, as the README says to add them."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("agentmemory.api.urls")),
]
