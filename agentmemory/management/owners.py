"""Users named on a command line: the ``--owner USERNAME`` option of the management commands
that create conversations (``replay_conversations``, ``chat``), the user they belong to,
created when there is none; and ``find_user_by_name``, the user a command names (``memory_md
--user``, ``import_conversation --owner``, ``forget_user``, ``mcp_server --user``)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, OutputWrapper
from django.db import IntegrityError, models, router, transaction

#: the help text of ``--owner``, after what the command creates ("the conversations created")
OWNER_HELP = (
    "the user who owns {what}, so that they show in that user's API list and the memory "
    "features (remember and recall tools, the memory block) have a user; created (with no "
    "usable password) when no user has that name. Default: no owner, only staff see {them}"
)


def find_user_by_name(username: str) -> AbstractBaseUser | None:
    """The user whose ``USERNAME_FIELD`` is ``username`` as typed or as ``create_user`` stores
    it (``AbstractBaseUser.normalize_username``: NFKC, so "alice" in full-width letters, or
    "Zu\u0308rich" decomposed as macOS file names and some terminals give it, is the user
    "alice" or "Z\u00fcrich"), or ``None``. The name as typed is tried first: a user stored
    without ``create_user`` keeps the name it was given."""
    user_model = get_user_model()
    manager = user_model._default_manager
    field = user_model.USERNAME_FIELD
    user = manager.filter(**{field: username}).first()
    normalised = user_model.normalize_username(username)
    if user is None and normalised != username:
        user = manager.filter(**{field: normalised}).first()
    return user  # type: ignore[no-any-return]


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
    username = user_model.normalize_username(username)
    manager = user_model._default_manager
    try:
        user = manager.get(**{field: username})
    except user_model.DoesNotExist:
        pass
    else:
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
