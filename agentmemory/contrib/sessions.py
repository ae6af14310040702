"""Conversations named by a framework's session id (the OpenAI Agents SDK's ``session_id``,
LangChain's ``session_id``), scoped to an owner and an agent key: shared by the framework
integrations in ``agentmemory.contrib``, with no framework of its own."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import router

from agentmemory.models import Conversation
from agentmemory.recall.scope import MemoryScopeError, require_user, scope_key
from agentmemory.validation import storable_text

__all__ = [
    "SESSION_NAMESPACE",
    "check_session",
    "find_session_conversation",
    "get_or_create_session_conversation",
    "session_owner_id",
    "session_uuid",
]

#: namespace of the conversations' uuids (``session_uuid``)
SESSION_NAMESPACE = uuid.UUID("5d0b8a52-2f4c-4a8e-9a53-0c1f7e0a6b21")


def session_owner_id(owner: Any) -> Any:
    """The primary key a framework's session, history or mirrored thread is owned by:
    ``owner``'s ``pk`` (a user), or ``owner`` itself (a primary key, or ``None`` for a
    conversation of nobody, which only staff see in the API).

    Raises:
        MemoryScopeError: ``owner`` is an anonymous user (``request.user`` of a request
            without login). It has no primary key, so its sessions were conversations of
            nobody, shared by every visitor who used the same session id; pass
            ``owner=None`` to keep such conversations knowingly.
    """
    if getattr(owner, "is_anonymous", False):
        raise MemoryScopeError(
            "an anonymous user owns no conversation: log the visitor in, or pass owner=None "
            "for a conversation of nobody (shared by every caller of the same session id)"
        )
    return getattr(owner, "pk", owner)


def check_session(session_id: Any, agent_key: Any) -> None:
    """Refuse, before any query, what names no session: a ``session_id`` that is not text, an
    ``agent_key`` that the conversation's column cannot hold (text of at most 100 characters
    without NUL or lone surrogates, as ``KnowledgeMemory`` requires of its agent key); the
    database refused those at the first write (PostgreSQL's ``DataError``).

    Raises:
        TypeError: ``session_id`` or ``agent_key`` is not text.
        ValueError: ``agent_key`` is too long or holds NUL or a lone surrogate
            (``MemoryScopeError``, the check of a knowledge memory's agent key).
    """
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be text, not {type(session_id).__name__}")
    if not isinstance(agent_key, str):
        raise TypeError(f"agent_key must be text, not {type(agent_key).__name__}")
    scope_key(agent_key, "agent_key", Conversation._meta.get_field("agent_key").max_length or 0)


def session_uuid(framework: str, session_id: str, *, owner_id: Any = None, agent_key: str = "") -> uuid.UUID:
    """The public uuid of the conversation holding a framework's session: a name-based uuid
    (RFC 9562, version 5) of the framework's name, the owner's primary key, the agent key
    and the session id. One session of one owner is one conversation wherever it is
    opened, and concurrent first writes create one row (the uuid is unique). Another
    owner's (or agent key's, or framework's) session of the same id is another
    conversation; every API read is scoped to the requesting user, so knowing the uuid
    grants nothing."""
    owner = None if owner_id is None else str(owner_id)
    return uuid.uuid5(SESSION_NAMESPACE, json.dumps([framework, owner, agent_key, session_id]))


def find_session_conversation(conversation_uuid: uuid.UUID) -> int | None:
    """The primary key of the conversation with this uuid, or ``None`` (one query)."""
    pk: int | None = (
        Conversation.objects.using(router.db_for_read(Conversation))
        .filter(uuid=conversation_uuid)
        .values_list("pk", flat=True)
        .first()
    )
    return pk


def get_or_create_session_conversation(
    conversation_uuid: uuid.UUID, *, session_id: str, metadata_key: str, owner_id: Any, agent_key: str
) -> int:
    """The primary key of the conversation with this uuid, created when missing with the
    owner, the agent key, the session id as its title (first 200 characters) and in its
    metadata under ``metadata_key`` (NUL and lone surrogates, which the database refuses,
    replaced by U+FFFD there).

    Raises:
        MemoryScopeError: the conversation is to be made and ``owner_id`` names no user. The
            foreign key refused it too, but only when the transaction commits, as a bare
            ``IntegrityError`` ("FOREIGN KEY constraint failed" on SQLite) that names nothing.
    """
    db = router.db_for_write(Conversation)
    manager = Conversation.objects.db_manager(db)
    existing: int | None = manager.filter(uuid=conversation_uuid).values_list("pk", flat=True).first()
    if existing is not None:
        return existing
    if owner_id is not None:
        require_user(owner_id, db)
    conversation, _ = manager.get_or_create(
        uuid=conversation_uuid,
        defaults={
            "owner_id": owner_id,
            "agent_key": agent_key,
            # any text names a session (its uuid is a hash); the copies are what storage takes
            "title": storable_text(session_id[:200]),
            "metadata": {metadata_key: storable_text(session_id)},
        },
    )
    return conversation.pk
