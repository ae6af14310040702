"""Delete confirmation pages that count a user's conversations, messages and summaries
instead of listing each row."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import NestedObjects, quote
from django.contrib.auth import get_user_model
from django.db import router
from django.db.models import CASCADE
from django.http import (
    HttpRequest,
)
from django.urls import NoReverseMatch, reverse
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import ngettext

from agentmemory.models import Conversation


class _SummarisingCollector(NestedObjects):
    """The admin's collector of what a delete removes, except that agentmemory's bulk rows
    (messages, summaries and whatever hangs off them, facts...) are counted, not loaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summarised: dict[Any, int] = {}

    def related_objects(self, related_model: Any, related_fields: Any, objs: Any) -> Any:
        queryset = super().related_objects(related_model, related_fields, objs)
        if (
            related_model._meta.app_label == Conversation._meta.app_label
            and related_model is not Conversation
        ):
            if any(f.remote_field.on_delete is CASCADE for f in related_fields):
                name = related_model._meta.verbose_name_plural
                self.summarised[name] = self.summarised.get(name, 0) + queryset.count()
            return queryset.none()
        return queryset


def summarised_deleted_objects(
    objs: Any, request: HttpRequest, admin_site: admin.AdminSite
) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
    """Django's ``get_deleted_objects`` for a delete confirmation page, but agentmemory's
    messages, summaries and the rows below them are given as counts, one query per model,
    instead of one line (and one permission check) per row: a user with 160,000 stored
    messages gets a page of a few lines. Conversations are listed with their message counts.

    Returns:
        ``(to_delete, model_count, perms_needed, protected)`` as the admin expects.
    """
    objs = list(objs)
    if not objs:
        return [], {}, set(), []
    using = router.db_for_write(objs[0]._meta.model)
    collector = _SummarisingCollector(using=using, origin=objs)
    collector.collect(objs)
    if isinstance(objs[0], get_user_model()):
        # The owner key is DO_NOTHING (a pre_delete receiver deletes conversations in bulk),
        # so the collector does not reach them: list them under their owners.
        owned = Conversation.objects.using(using).filter(owner__in=objs).select_related("owner")
        collector.collect(list(owned), source=get_user_model(), source_attr="owner")
    perms_needed: set[Any] = set()

    def format_callback(obj: Any) -> Any:
        opts = obj._meta
        name = capfirst(opts.verbose_name)
        extra = ""
        if isinstance(obj, Conversation):
            count = number_format(obj.message_count, force_grouping=True)
            extra = " " + ngettext("(%(count)s message)", "(%(count)s messages)", obj.message_count) % {
                "count": count
            }
        if not admin_site.is_registered(type(obj)):
            return f"{name}: {obj}{extra}"
        if not admin_site.get_model_admin(type(obj)).has_delete_permission(request, obj):
            perms_needed.add(opts.verbose_name)
        try:
            url = reverse(
                f"{admin_site.name}:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)]
            )
        except NoReverseMatch:
            return f"{name}: {obj}{extra}"
        return format_html('{}: <a href="{}">{}</a>{}', name, url, obj, extra)

    to_delete = collector.nested(format_callback)
    protected = [format_callback(obj) for obj in collector.protected]
    model_count: dict[Any, int] = {
        model._meta.verbose_name_plural: len(rows)  # type: ignore[attr-defined]  # stubs type keys as str
        for model, rows in collector.model_objs.items()
    }
    model_count.update(collector.summarised)
    return to_delete, model_count, perms_needed, protected


class SummarisedDeletionMixin:
    """For the admin of a model whose rows own conversations (the user model): the delete
    confirmation page counts their messages and summaries instead of listing each one."""

    admin_site: admin.AdminSite

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
        return summarised_deleted_objects(objs, request, self.admin_site)


def summarise_user_deletions(site: admin.AdminSite = admin.site) -> None:
    """Give the user model's admin on ``site`` the summarised delete confirmation page
    (``SummarisedDeletionMixin``), keeping the admin class the project registered.

    Called for the default site when this module is imported (admin autodiscovery), which
    finds the user admin when its app comes before ``agentmemory`` in ``INSTALLED_APPS``
    (``django.contrib.auth`` usually does). A project that registers its user admin later,
    or on another site, calls this after registering it. Does nothing when the user model has
    no admin, or already has the mixin.
    """
    user_model = get_user_model()
    current = site._registry.get(user_model)
    if current is None or isinstance(current, SummarisedDeletionMixin):
        return
    cls = type(current)
    site.unregister(user_model)
    site.register(
        user_model, type(cls.__name__, (SummarisedDeletionMixin, cls), {"__module__": cls.__module__})
    )
