"""What of a stored message's ``metadata`` a context window carries: the part a converter
sends, read as a JSON subtree computed by the database for the rows that have it (NULL for
every other row), so that the rest (model, usage, latency, provider payload) is neither read
nor decoded on the window's read path.

Two subtrees are sent:

* an ``ai`` message's thinking blocks (``metadata["thinking"]``): Anthropic requires them back
  at the head of their turn while its tool loop is in progress, OpenAI-compatible thinking-mode
  servers (DeepSeek, Kimi) the ``reasoning_content`` of every turn that carried it;
* a ``tool`` result's error flag (``metadata["is_error"]`` stored as JSON ``true``): Anthropic's
  ``tool_result`` block takes ``"is_error": true`` for a tool that failed, LangChain's
  ``ToolMessage`` ``status="error"`` (``agentmemory.formats``). Without it a failed call reads
  to the model as a success whose text happens to start with "Error".

The same SQL serves every read of a window's messages: the tail read and the head statement
(``agentmemory.store.window``, and the server-side functions a migration freezes from it), the
rows the tail read left without content (``read_contents``) and the rebuild of a recorded model
call's window (``agentmemory.calls``); ``sent_metadata`` decodes it the same way for all.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models import TextField
from django.db.models.expressions import RawSQL

from agentmemory.messages import Role
from agentmemory.models import Message
from agentmemory.store.rows import _thinking

__all__ = ["sent_metadata", "sent_metadata_column", "sent_metadata_sql"]

_TOOL = Role.TOOL.value


def _is_true(vendor: str, column: str, key: str) -> str:
    """SQL that is true where ``column`` (a JSON object) holds JSON ``true`` under ``key``,
    NULL or false otherwise: PostgreSQL's jsonb comparison, SQLite's ``json_type`` (its
    ``json_extract`` gives 1 for ``true`` and for the number 1 alike)."""
    if vendor == "postgresql":
        return f"({column} -> '{key}') = 'true'::jsonb"
    return f"json_type({column}, '$.{key}') = 'true'"


def _subtree(vendor: str, column: str, key: str) -> str:
    """``column -> key``: JSON text, or NULL when the key is absent (PostgreSQL's jsonb
    operator, SQLite's ``json_extract``)."""
    if vendor == "postgresql":
        return f"({column} -> '{key}')"
    return f"json_extract({column}, '$.{key}')"


def sent_metadata_sql(alias: str, metadata: str, role: str) -> str:
    """SQL of the JSON a window carries of a row's ``metadata`` on ``alias``'s database, for
    the columns ``metadata`` and ``role`` as written in the statement: an ``ai`` row's
    thinking subtree (NULL when absent), JSON ``true`` for a ``tool`` row whose
    ``is_error`` is JSON ``true``, NULL for every other row. A jsonb value on PostgreSQL
    (the type of the column it fills in the head statement's UNION)."""
    vendor = connections[alias].vendor
    true = "'true'::jsonb" if vendor == "postgresql" else "'true'"
    return (
        f"CASE WHEN {role} = '{Role.AI.value}' THEN {_subtree(vendor, metadata, 'thinking')} "
        f"WHEN {role} = '{_TOOL}' AND {_is_true(vendor, metadata, 'is_error')} THEN {true} END"
    )


def sent_metadata_column(alias: str) -> RawSQL:
    """``sent_metadata_sql`` over ``Message``'s own columns, for a queryset's ``values_list``
    on ``alias``: the value as the driver returns it (JSON text, or NULL), for
    ``sent_metadata``."""
    qn = connections[alias].ops.quote_name
    table = qn(Message._meta.db_table)

    def column(name: str) -> str:
        field: Any = Message._meta.get_field(name)
        return f"{table}.{qn(field.column)}"

    return RawSQL(sent_metadata_sql(alias, column("metadata"), column("role")), (), output_field=TextField())


def sent_metadata(role: str, raw: Any) -> dict[str, Any] | None:
    """The ``metadata`` a window message carries, from the value ``sent_metadata_sql`` read
    for its row (the caller skips NULL, so a row without either subtree costs nothing here):
    ``{"is_error": True}`` for a ``tool`` row (the statement returns a value for a failed
    result only), ``{"thinking": blocks}`` for an ``ai`` row with thinking blocks
    (``_thinking``), ``None`` otherwise."""
    if role == _TOOL:
        return {"is_error": True}
    return _thinking(raw)
