"""Helpers shared by the admin classes: links, JSON display, a bounded paginator, query checks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.paginator import Paginator
from django.db import DataError, router, transaction
from django.db.models import DateTimeField, Model, QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
)
from django.urls import reverse
from django.utils.formats import date_format, number_format
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.timezone import is_naive, localtime
from django.utils.translation import gettext_lazy as _

from agentmemory.conf import app_settings
from agentmemory.messages import Role
from agentmemory.models import Conversation
from agentmemory.validation import MAX_ID, parse_id, text_problem

# The admin's <pre> is small and grey (meant for code snippets); stored text is the content.
PRE_STYLE = (
    "white-space: pre-wrap; word-break: break-word; margin: 0; padding: 0; max-width: 100%; "
    "color: var(--body-fg); font-size: 0.8125rem;"
)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON in a ``<pre>`` block (escaped), an array of numbers, strings,
    booleans or nulls on one line (wrapped by the page): a record's list of 300 recalled seqs
    was a column 300 lines tall."""
    return format_html('<pre style="{}">{}</pre>', PRE_STYLE, _json_text(value, ""))


def _json_text(value: Any, margin: str) -> str:
    """``json.dumps(value, indent=2, sort_keys=True)``, but arrays of scalars inline."""
    inner = margin + "  "
    if isinstance(value, dict) and value:
        items = (
            f"{inner}{json.dumps(str(key), ensure_ascii=False)}: {_json_text(value[key], inner)}"
            for key in sorted(value, key=str)
        )
        return "{\n" + ",\n".join(items) + "\n" + margin + "}"
    if isinstance(value, list | tuple) and value and any(isinstance(v, dict | list | tuple) for v in value):
        return "[\n" + ",\n".join(inner + _json_text(v, inner) for v in value) + "\n" + margin + "]"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def admin_link(obj: Any, text: Any = None) -> str:
    """A link to the admin change (or view) page of ``obj``."""
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text if text is not None else obj)


def short_datetime(value: Any) -> str:
    """A narrow date and time for changelist columns (the long form wraps tables off screen),
    in the current time zone, or in UTC, marked so, when it has no date there
    (``shown_datetime``)."""
    if not value:
        return "-"
    shown = shown_datetime(value)
    if isinstance(shown, _UTCDateTime):
        return f"{date_format(shown, 'SHORT_DATETIME_FORMAT')} UTC"
    return date_format(localtime(value), "SHORT_DATETIME_FORMAT")


class _UTCDateTime(datetime):
    """A date and time in UTC that Django's templates show as it is: ``template_localtime``
    (which ``display_for_field`` and ``{{ }}`` call) reads ``convert_to_local_time``."""

    convert_to_local_time = False


def shown_datetime(value: Any) -> Any:
    """``value`` as the admin shows it: as it is, or, for an aware date and time with no
    date in the current time zone, the same instant in UTC that the templates do not
    convert. Python's dates end at years 1 and 9999: with a ``TIME_ZONE`` other than UTC
    (Django's default is America/Chicago), a stored 0001-01-01 00:00 UTC is year 0 there,
    and every page that showed it raised ``OverflowError`` (a 500)."""
    if not isinstance(value, datetime) or is_naive(value) or isinstance(value, _UTCDateTime):
        return value
    try:
        localtime(value)
    except OverflowError:
        moment = value.astimezone(UTC)
        return _UTCDateTime(*moment.timetuple()[:6], moment.microsecond, tzinfo=UTC)
    return value


def show_stored_dates(obj: Model) -> Model:
    """``obj`` with each of its date and time columns as ``shown_datetime`` gives it (the
    same instant, so a form saved from the page writes what was stored)."""
    for field in obj._meta.concrete_fields:
        if isinstance(field, DateTimeField) and field.attname in obj.__dict__:
            setattr(obj, field.attname, shown_datetime(getattr(obj, field.attname)))
    return obj


def short_conversation(conversation: Conversation | None, chars: int = 18) -> str:
    """A list column's name for a conversation: ``Conversation.label`` with the title cut to
    ``chars`` characters (the uuid's 8 hex digits that follow tell equal titles apart, and
    keep the column about as wide as a 28-character title)."""
    if conversation is None:
        return "-"
    return conversation.label(chars)


def changelist_url(model: type[Model], **filters: Any) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


class BoundedCountPaginator(Paginator):
    """A paginator that counts at most ``MAX_COUNT`` rows.

    The admin counts the (filtered) changelist on every page view; over a message table of
    millions of rows an exact ``COUNT(*)`` is a full index scan that grows with the table. The
    count here reads at most ``MAX_COUNT + 1`` rows (``SELECT COUNT(*) FROM (... LIMIT n)``),
    so its cost has a ceiling whatever the table holds; ``capped`` says that more rows match,
    and the page shows "10,000+". Large Django installations do the same (a count with a
    limit, or none at all) for the same reason.
    """

    MAX_COUNT = 100_000

    @cached_property
    def count(self) -> int:
        object_list = self.object_list
        if isinstance(object_list, QuerySet):
            found = object_list[: self.MAX_COUNT + 1].count()
            self.capped = found > self.MAX_COUNT
            return min(found, self.MAX_COUNT)
        return len(object_list)

    capped = False


#: filters whose value is a primary key: another value is refused rather than compared
_ID_FILTERS = ("__id__exact", "__id", "__pk")
_ID_KEYS = frozenset({"id", "pk", "id__exact", "pk__exact"})


def query_problem(request: HttpRequest) -> str | None:
    """Why the query string cannot be used as filters, or ``None``: a NUL character or a lone
    surrogate in a name or value (PostgreSQL refuses them in any text comparison), or an id
    filter (``conversation__id__exact``, ``owner__id__exact``, ...) whose value is not a
    whole number of ASCII digits within a 64-bit integer (``"²"`` passes ``str.isdigit()``
    but not ``int()``; a larger number overflows SQLite)."""
    for key, values in request.GET.lists():
        for text in (key, *values):
            problem = text_problem(text)
            if problem:
                return _("The filter %(name)s %(problem)s.") % {"name": key[:50], "problem": problem}
        if (key in _ID_KEYS or key.endswith(_ID_FILTERS)) and any(
            parse_id(value) is None for value in values
        ):
            return _(
                "The filter %(name)s must be an id: a whole number of ASCII digits, at most %(max)s."
            ) % {
                "name": key[:50],
                "max": MAX_ID,
            }
    return None


class _UncomparableFilter(Exception):
    """A filter value of the query string that the database cannot compare."""


class CheckedQueryAdmin(admin.ModelAdmin):
    """Refuses filters the database cannot compare with a 400, instead of a server error.

    Besides ``query_problem``'s checks: the admin passes any lookup on the model's own
    fields from the query string to the database (``?pk__in=``, ``?created_at__year=``), and
    a value past what the database or Python can hold (a number over 64 bits, a year
    outside 1-9999, a time with no UTC time such as year 1 at +14:00) raised an
    ``OverflowError``, ``ValueError`` or ``DataError`` from the list's count: a 500. A search
    longer than ``max_search_chars`` is refused too (SQLite: "LIKE or GLOB pattern too
    complex" past 50,000 bytes, "Expression tree is too large" past 1,000 words)."""

    #: longest search (characters) the list takes; ``None``: no bound of its own
    max_search_chars: int | None = None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        problem = query_problem(request)
        search = request.GET.get(SEARCH_VAR, "")
        if not problem and self.max_search_chars is not None and len(search) > self.max_search_chars:
            problem = _("A search is at most %(max)s characters.") % {"max": self.max_search_chars}
        if problem:
            return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
        try:
            return super().changelist_view(request, extra_context)
        except _UncomparableFilter as exc:
            return HttpResponseBadRequest(
                _("A filter cannot be compared: %(reason)s.") % {"reason": exc},
                content_type="text/plain; charset=utf-8",
            )

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        # a change page shows the stored dates in the current time zone, in UTC where they
        # have no date there (``shown_datetime``)
        obj = super().get_object(request, object_id, from_field)
        return show_stored_dates(obj) if obj is not None else None

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        # The list's count runs here (the page's rows, with the same conditions, when the
        # page is drawn).
        try:
            return super().get_changelist_instance(request)
        except (OverflowError, ValueError, DataError) as exc:
            using = router.db_for_read(self.model)
            if isinstance(exc, DataError) and transaction.get_connection(using).in_atomic_block:
                # the database refused the statement (OverflowError and ValueError come from
                # Python, before it), and PostgreSQL's transaction is unusable after that
                # (ATOMIC_REQUESTS): the request's transaction is rolled back, not committed
                transaction.set_rollback(True, using=using)
            raise _UncomparableFilter(str(exc).strip()[:200]) from None


class ReadOnlyAdmin(CheckedQueryAdmin):
    """History is written by the services; the admin shows it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    #: title of a changelist filtered to one conversation (``%(name)s``), or None
    changelist_title: Any = None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        conversation = filtered_conversation(request)
        request._agentmemory_conversation = conversation  # type: ignore[attr-defined]  # read by list filters
        if conversation is not None and self.changelist_title is not None:
            extra_context = {**(extra_context or {}), "title": self.changelist_title % {"name": conversation}}
        return super().changelist_view(request, extra_context)


class StorableJSONField(forms.JSONField):
    """A JSON form field that refuses JSON too deep for Python's parser (an error on the form,
    not a server error) and can show back any value it refused: text the page cannot be
    encoded with (a lone surrogate) is shown with JSON escapes."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None  # a box left blank, spaces included
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(_("Metadata is nested too deeply.")) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        text = super().prepare_value(value)
        if isinstance(text, str) and text_problem(text):
            return (
                json.dumps(value, ensure_ascii=True)
                if not isinstance(value, str)
                else text.encode("utf-8", "backslashreplace").decode("utf-8")
            )
        return text


def int_param(
    request: HttpRequest, name: str, default: int | None, *, minimum: int, maximum: int, errors: list[str]
) -> Any:
    """A whole-number query parameter within ``minimum..maximum``; anything else (a sign,
    ``nan``, ``inf``, an exponent, a NUL) adds an error and gives ``default``."""
    raw = request.GET.get(name, "").strip()
    if not raw:
        return default
    if not raw.isascii() or not raw.isdigit():
        shown = raw[:40].encode("unicode_escape").decode("ascii")
        errors.append(_("%(name)s must be a whole number, not %(raw)r.") % {"name": name, "raw": shown})
        return default
    # a number of more digits than any bound is over it (not parsed: int() of a long string
    # costs time quadratic in its length)
    value = int(raw) if len(raw.lstrip("0")) <= 18 else maximum + 1
    if value < minimum:
        errors.append(_("%(name)s must be at least %(minimum)d.") % {"name": name, "minimum": minimum})
        return default
    if value > maximum:
        errors.append(
            _("%(name)s must be at most %(maximum)s (AGENTMEMORY['MAX_CONTEXT_TOKENS'] for max_tokens).")
            % {"name": name, "maximum": number_format(maximum, force_grouping=True)}
        )
        return default
    return value


def filtered_conversation_id(request: HttpRequest) -> int | None:
    return parse_id(request.GET.get("conversation__id__exact", ""))


def filtered_conversation(request: HttpRequest) -> Conversation | None:
    pk = filtered_conversation_id(request)
    if pk is None:
        return None
    return Conversation.objects.only("id", "uuid", "title").filter(pk=pk).first()


#: most history messages a window page shows, the context page or a call's window as sent
#: (each is a table row: 200,000 of them made a page of 42 to 59 MB that took 19 to 36 s)
WINDOW_PAGE_MESSAGES = 1_000


def newest_shown(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``(entries shown, history messages left out)``: the system prompt, summary and memory
    block, and the newest history messages, at most ``WINDOW_PAGE_MESSAGES`` of them and as
    many as fit in ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` characters of text, from a human
    message on; the newest turn is always shown."""
    history = [i for i, entry in enumerate(entries) if entry["part"] == "history"]
    if not history:
        return entries, 0
    budget = app_settings().API_MAX_RESPONSE_BYTES
    keep = 0
    size = 0
    for index in reversed(history):
        message = entries[index]["message"]
        size += len(message.content or "") + sum(
            len(call["arguments"]) for call in entries[index]["tool_calls"]
        )
        if keep and (keep >= WINDOW_PAGE_MESSAGES or size > budget):
            break
        keep += 1
    cut = len(history) - keep
    humans = [n for n, index in enumerate(history) if entries[index]["message"].role == Role.HUMAN]
    if cut and humans:
        cut = next((n for n in humans if n >= cut), humans[-1])
    dropped = set(history[:cut])
    return [entry for i, entry in enumerate(entries) if i not in dropped], cut
