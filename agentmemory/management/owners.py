"""How the management commands name a user: ``find_user`` for the commands that act on an
existing user (``forget_user``, ``memory_md``, ``import_conversation --owner``,
``mcp_server``), and ``resolve_owner`` for the ``--owner USERNAME`` option of those that
create conversations (``replay_conversations``, ``chat``), which creates the user when there
is none. Both read a name by one rule: as given, else as ``create_user`` stores it (NFKC)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, OutputWrapper
from django.db import IntegrityError, models, router, transaction

from agentmemory.validation import parse_id

#: the help text of ``--owner``, after what the command creates ("the conversations created")
OWNER_HELP = (
    "the user who owns {what}, so that they show in that user's API list and the memory "
    "features (remember and recall tools, the memory block) have a user; created (with no "
    "usable password) when no user has that name. Default: no owner, only staff see {them}"
)


def user_by_name(username: str) -> AbstractBaseUser | None:
    """The user whose name (the user model's ``USERNAME_FIELD``) is ``username`` as given,
    else as ``create_user`` stores it (``AbstractBaseUser.normalize_username``, NFKC: "alice"
    typed in full-width letters is "alice"); ``None`` when there is none. The one rule every
    command reads a user's name by (``find_user``, ``resolve_owner``): ``chat --owner`` found
    the user that ``forget_user``, ``memory_md --user`` and ``mcp_server --user`` said did
    not exist."""
    user_model = get_user_model()
    manager = user_model._default_manager
    field = user_model.USERNAME_FIELD
    user = manager.filter(**{field: username}).first()
    normalized = user_model.normalize_username(username)
    if user is None and normalized != username:
        user = manager.filter(**{field: normalized}).first()
    return user


def find_user(value: str, *, by: str | None = None) -> AbstractBaseUser:
    """The existing user ``value`` names: a name (``user_by_name``) or, with ``by`` None or
    ``"pk"``, a primary key; ``by="username"`` reads it only as a name, ``by="pk"`` only as
    a primary key.

    Raises:
        CommandError: no such user; a ``value`` that is no primary key with ``by="pk"``; or,
            with ``by`` None, a name of one user that is the primary key of another.
    """
    by_name = user_by_name(value) if by in (None, "username") else None
    pk = parse_id(value)
    if by == "pk" and pk is None:
        raise CommandError(f"{value!r} is not a primary key")
    by_pk = None
    if by in (None, "pk") and pk is not None:
        by_pk = get_user_model()._default_manager.filter(pk=pk).first()
    if by_name is not None and by_pk is not None and by_name.pk != by_pk.pk:
        raise CommandError(
            f"{value!r} is the username of user {by_name.pk} and the id of another user; "
            "pass --by username or --by pk"
        )
    user = by_name or by_pk
    if user is None:
        how = {None: "by username or primary key", "username": "by username", "pk": "by primary key"}[by]
        raise CommandError(f"no user {value!r} ({how})")
    return user


def resolve_owner(username: str, stdout: OutputWrapper | None, *, purpose: str) -> AbstractBaseUser:
    """The user named ``username`` (by the user model's ``USERNAME_FIELD``, the name
    normalised as ``create_user`` stores it: ``AbstractBaseUser.normalize_username``, NFKC),
    created with no usable password when there is none, so that it can own conversations but not log in until
    someone sets a password (``manage.py changepassword``).

    Args:
        username: the name given to ``--owner``.
        stdout: where to say that a user was created ("Created user 'alice' {purpose}; it
            logs in once it is given a password") or that the user found is inactive;
            ``None`` says nothing (a caller that gives
            the user a password itself).
        purpose: why the user is needed, as the message says it ("to own the conversation").

    Raises:
        CommandError: an empty name, or one the user model refuses (its field validators, or
            required fields a custom user model has beside the username).
    """
    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    if not username.strip():
        raise CommandError("--owner needs a user name")
    # the name as ``create_user`` stores it (NFKC: "alice" typed in full-width letters is "alice"), so a
    # look-alike spelling finds the user instead of making a second one
    manager = user_model._default_manager
    user = user_by_name(username)
    username = user_model.normalize_username(username)
    if user is not None:
        if not getattr(user, "is_active", True) and stdout is not None:
            stdout.write(
                f"User {username!r} is inactive: the conversation is theirs, but they cannot log "
                "in to see it until they are made active again"
            )
        return user
    try:
        username_field = user_model._meta.get_field(field)
        if isinstance(username_field, models.Field):
            username_field.clean(username, None)
        with transaction.atomic(using=router.db_for_write(user_model)):
            user = manager.create(**{field: username, "password": make_password(None)})
    except ValidationError as exc:
        raise CommandError(f"--owner {username!r}: {' '.join(exc.messages)}") from exc
    except (IntegrityError, ValueError, TypeError) as exc:
        raise CommandError(f"--owner {username!r}: no such user, and none could be created ({exc})") from exc
    if stdout is not None:
        stdout.write(
            f"Created user {username!r} {purpose}; it logs in once it is given a password "
            f"(`manage.py changepassword {username}`)"
        )
    return user
