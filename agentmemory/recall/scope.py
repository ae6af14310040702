"""Scope of long-term memory: the owner (required), agent key and namespace, matched exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from agentmemory.exceptions import AgentMemoryError
from agentmemory.validation import MAX_ID, text_problem

__all__ = ["MemoryScope", "MemoryScopeError", "owner_id_of", "require_user", "scope_key"]


class MemoryScopeError(AgentMemoryError, ValueError):
    """A long-term memory read or write without an owner (or with an owner that is not a
    saved user). Every fact and every searched message belongs to one user; an unscoped
    call could reach another user's memory, so it is refused (the peer bug report behind this
    rule: mem0ai/mem0#3928, a user's ``delete_all`` that wiped every user's memories)."""


def require_user(owner_id: int, using: str) -> None:
    """Refuse an owner id that names no user on the database ``using``. A row's foreign key
    would refuse it too, but late: at the commit, as an ``IntegrityError`` a caller can
    take for something else (a race of writers).

    Raises:
        MemoryScopeError: no user has the id.
    """
    if not get_user_model()._default_manager.using(using).filter(pk=owner_id).exists():
        raise MemoryScopeError(f"no user with id {owner_id}")


def owner_id_of(owner: Any) -> int:
    """The primary key of ``owner``: a saved user instance or a positive integer.

    Raises:
        MemoryScopeError: None, an anonymous or unsaved user, a bool or any other type.
    """
    if owner is None:
        raise MemoryScopeError("long-term memory needs an owner (a user or a user id)")
    if isinstance(owner, bool):
        raise MemoryScopeError("an owner must be a user or a user id, not a bool")
    if isinstance(owner, int):
        if not 0 < owner <= MAX_ID:
            # past 64 bits no database holds the id (SQLite's driver raised OverflowError)
            raise MemoryScopeError(f"an owner id must be from 1 to {MAX_ID}, not {owner}")
        return owner
    if getattr(owner, "is_anonymous", False):
        raise MemoryScopeError("an anonymous user has no long-term memory")
    pk = getattr(owner, "pk", None)
    if not isinstance(pk, int) or isinstance(pk, bool):
        raise MemoryScopeError(f"an owner must be a saved user or a user id, not {owner!r}")
    return pk


def scope_key(value: str | None, what: str, max_length: int) -> str:
    """``value`` as a scope's agent key or namespace (``None`` is ``""``).

    Raises:
        MemoryScopeError (a ``ValueError``): not text, longer than ``max_length``
            characters, or holding a NUL or a lone surrogate, which the database refuses.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MemoryScopeError(f"{what} must be a string or None, not {type(value).__name__}")
    if len(value) > max_length or text_problem(value):
        # a NUL or a lone surrogate would fail in the database driver, not as a scope error
        raise MemoryScopeError(
            f"{what} must be at most {max_length} characters without NUL or lone surrogates"
        )
    return value


@dataclass(frozen=True)
class MemoryScope:
    """One owner's memory for one agent key and namespace. ``None`` and ``""`` both mean
    "no agent key" / "no namespace", which is a scope of its own (not a wildcard)."""

    owner_id: int
    agent_key: str = ""
    namespace: str = ""

    @classmethod
    def of(cls, owner: Any, agent_key: str | None = None, namespace: str | None = None) -> MemoryScope:
        return cls(
            owner_id=owner_id_of(owner),
            agent_key=scope_key(agent_key, "agent_key", 100),
            namespace=scope_key(namespace, "namespace", 200),
        )

    def filter(self) -> dict[str, Any]:
        """Keyword arguments of an exact ``Fact`` filter for this scope."""
        return {"owner_id": self.owner_id, "agent_key": self.agent_key, "namespace": self.namespace}
