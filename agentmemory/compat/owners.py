"""Who owns the long-term memory of a compat class made without an owner.

Our long-term memory always belongs to a user (``MemoryScope``: an unscoped read could reach
another user's facts). The frameworks' examples make memories without one
(``KnowledgeMemory(storage_dir=...)``, ``SemanticMemory(max_results=3)``), because their
stores are a directory or a process. Such a memory here belongs to one shared user,
``COMPAT_USERNAME``, made on first use (inactive, no usable password): the same
single-tenant sharing as their files, kept apart from every real user. Pass ``owner=`` to
give the memory to a user of yours instead.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

__all__ = ["COMPAT_USERNAME", "namespace_for_dir", "owner_or_shared"]

#: the username of the shared owner of compat memories made without ``owner=``
COMPAT_USERNAME = "agentmemory-compat"

#: most characters of ``MemoryScope.namespace`` (the column's length)
_MAX_NAMESPACE = 200
_SURROGATE = re.compile("[\ud800-\udfff]")


def owner_or_shared(owner: Any = None) -> Any:
    """``owner`` when given, else the shared compat user (created now if missing, inactive,
    with an unusable password). One query when the user exists.

    Raises:
        TypeError, ValueError: a custom user model whose other required fields have no
            default (pass ``owner=``).
        PermissionError: a user named ``COMPAT_USERNAME`` exists that can log in (active, or
            with a usable password): on a site with open sign-up someone may have taken the
            name, and the shared memories must never become a real account's. Pass
            ``owner=``, or deactivate that user and make its password unusable.
    """
    if owner is not None:
        return owner
    user_model = get_user_model()
    lookup: dict[str, Any] = {user_model.USERNAME_FIELD: COMPAT_USERNAME}
    user, created = user_model._default_manager.get_or_create(**lookup)
    if created:
        user.set_unusable_password()
        if hasattr(user, "is_active"):
            user.is_active = False
        user.save()
    elif getattr(user, "is_active", False) or user.has_usable_password():
        raise PermissionError(
            f"the user {COMPAT_USERNAME!r} can log in, so it cannot hold the shared memories of compat "
            "classes made without owner=: pass owner=, or deactivate that user and make its password unusable"
        )
    return user


def namespace_for_dir(storage_dir: str | Path, framework: str = "selectools") -> str:
    """The memory namespace standing for a storage directory: ``"<framework>:"`` and the
    directory's absolute path (``~`` expanded, symlinks and ``..`` resolved, so the same
    directory named two ways is one namespace; a relative path is taken from the current
    directory, as a file store would take it). A path too long for the column (200
    characters), or holding a lone surrogate (a file name that is not UTF-8, as
    ``os.fsdecode`` gives it), which no database stores, is named by its SHA-256 instead:
    ``"<framework>:sha256:<hex>"``."""
    resolved = str(Path(storage_dir).expanduser().resolve())
    namespace = f"{framework}:{resolved}"
    if len(namespace) <= _MAX_NAMESPACE and not _SURROGATE.search(namespace):
        return namespace
    return f"{framework}:sha256:{hashlib.sha256(resolved.encode('utf-8', 'surrogatepass')).hexdigest()}"
