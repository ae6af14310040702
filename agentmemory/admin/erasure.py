"""The admin action "Erase all memory of the owners of the selected conversations".

Added to the conversation admin's actions. It shows a confirmation page with each owner and
what erasing them removes (counted, not listed), then runs ``agentmemory.deletion.forget_user``
for each owner and reports the counts. Needs the permission to delete conversations and facts.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentmemory.deletion import erasure_counts, forget_user
from agentmemory.models import Conversation, Fact


@admin.action(
    description=gettext_lazy("Erase all memory of the owners of the selected conversations"),
    permissions=["delete"],
)
def forget_owners(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> HttpResponse | None:
    """Confirm, then erase every conversation, message, summary, fact, embedding, index entry
    and usage record of the owners of the selected conversations (their accounts stay).
    Conversations without an owner are left alone."""
    owner_ids = sorted(set(queryset.exclude(owner=None).values_list("owner_id", flat=True)))
    if not owner_ids:
        modeladmin.message_user(
            request, _("None of the selected conversations has an owner."), messages.WARNING
        )
        return None
    if not request.user.has_perm(f"{Fact._meta.app_label}.delete_{Fact._meta.model_name}"):  # type: ignore[union-attr]
        modeladmin.message_user(
            request, _("Erasing a user's memory needs the permission to delete facts too."), messages.ERROR
        )
        return None
    owners = list(get_user_model()._default_manager.filter(pk__in=owner_ids).order_by("pk"))
    if request.POST.get("post") != "yes":
        rows = [(owner, erasure_counts([owner])) for owner in owners]
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": _("Erase all memory of these users?"),
            "opts": modeladmin.model._meta,
            "owners": rows,
            "queryset": queryset,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action_name": "forget_owners",
        }
        return TemplateResponse(request, "agentmemory/admin/forget_owners_confirmation.html", context)
    for owner in owners:
        report = forget_user(owner)
        modeladmin.message_user(
            request,
            _(
                "Erased the memory of %(user)s: %(conversations)d conversations, %(messages)d messages, "
                "%(summaries)d summaries, %(facts)d facts, %(embeddings)d embeddings, "
                "%(fulltext)d full-text entries, %(other)d other rows."
            )
            % {
                "user": owner.get_username(),
                "conversations": report.conversations,
                "messages": report.messages,
                "summaries": report.summaries,
                "facts": report.facts,
                "embeddings": report.message_embeddings + report.fact_embeddings,
                "fulltext": report.fulltext_entries,
                "other": sum(report.other.values()),
            },
            messages.SUCCESS,
        )
    return None


__all__ = ["forget_owners"]
