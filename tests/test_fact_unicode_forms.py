"""A fact repeated in another Unicode form is a repeat: typed composed and decomposed
("Zürich", "Zu\\u0308rich" as macOS writes it), in full-width letters, or with an invisible
character pasted in. Each was stored as a second live fact, and both were shown to the model
(``build_context()``, the memory block)."""

from __future__ import annotations

import hashlib
import unicodedata

import pytest

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from tests.factories import UserFactory
from tests.helpers_migrations import migrate_to, migrate_to_latest

NFD = "I live in Zu\u0308rich"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("first", "repeat"),
    [
        ("I live in Zürich", NFD),
        (NFD, "I live in Zürich"),
        ("Prefers dark mode", "Prefers dark\u200b mode"),
        ("Prefers dark mode", "Prefers \ufeffdark mode\u00ad"),
        ("Loves ❤\ufe0f Paris", "Loves ❤ Paris"),
        ("Prefers dark mode", "Prefers \uff44ark mode"),
        ("Prefers dark mode", "Prefers\u2003dark mode"),
    ],
)
def test_a_repeat_in_another_unicode_form_adds_nothing(first: str, repeat: str) -> None:
    memory = KnowledgeMemory(UserFactory())
    stored = memory.store(first, persistent=True).fact
    result = memory.store(repeat, persistent=True)
    assert result.action == "duplicate" and result.fact.pk == stored.pk
    assert memory.live_facts().count() == 1
    assert memory.build_context().count(stored.content) == 1


@pytest.mark.django_db
def test_a_decomposed_fact_is_stored_composed_and_its_key_supersedes() -> None:
    memory = KnowledgeMemory(UserFactory())
    old = memory.store("Café préféré: Flore").fact
    result = memory.store(unicodedata.normalize("NFD", "Café préféré: Deux Magots"))
    assert result.action == "superseded" and result.superseded_ids == (old.pk,)
    assert result.fact.content == "Café préféré: Deux Magots"  # composed (NFC)
    assert [f.content for f in memory.live_facts()] == ["Café préféré: Deux Magots"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Emoji: 👨\u200d👩\u200d👧", "Emoji: 👨👩👧"),  # the joiner makes one family glyph
        ("Prefers dark mode", "prefers dark mode"),  # case may be the change
        ("Weighs 70 kg", "Weighs 72 kg"),
    ],
)
def test_other_text_is_still_another_fact(first: str, second: str) -> None:
    memory = KnowledgeMemory(UserFactory())
    memory.store(first, category="a")
    assert memory.store(second, category="b").action == "created"


def _old_hash(content: str) -> str:
    return hashlib.sha256(" ".join(content.split()).encode()).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_the_migration_composes_stored_facts_and_makes_repeats_history() -> None:
    apps = migrate_to([("agentmemory", "0034_fulltext_words_as_written")])
    try:
        User = apps.get_model("auth", "User")
        Fact0034 = apps.get_model("agentmemory", "Fact")
        alice, bob = User.objects.create(username="alice"), User.objects.create(username="bob")

        def make(owner, content, **extra):  # type: ignore[no-untyped-def]
            return Fact0034.objects.create(
                owner_id=owner.pk, content=content, content_hash=_old_hash(content), **extra
            )

        composed = make(alice, "I live in Zürich")
        decomposed = make(alice, NFD)  # newer: stays in force
        older = make(alice, "I lived in Zu\u0308rich", superseded_by_id=None)
        Fact0034.objects.filter(pk=older.pk).update(superseded_by_id=composed.pk)  # history of the loser
        plain = make(alice, "Prefers dark mode")
        spaced = make(alice, "Prefers dark\u200b mode")
        bobs = make(bob, NFD)  # another owner: its own scope
        ascii_only = make(alice, "Works at Northwind")

        apps = migrate_to([("agentmemory", "0035_fact_repeats_in_any_unicode_form")])
        Fact0035 = apps.get_model("agentmemory", "Fact")
        rows = {f.pk: f for f in Fact0035.objects.all()}
        assert (
            rows[decomposed.pk].content == "I live in Zürich" and rows[decomposed.pk].superseded_by_id is None
        )
        assert rows[composed.pk].superseded_by_id == decomposed.pk
        assert rows[older.pk].superseded_by_id == decomposed.pk
        assert rows[spaced.pk].superseded_by_id is None and rows[plain.pk].superseded_by_id == spaced.pk
        assert rows[bobs.pk].superseded_by_id is None
        assert rows[ascii_only.pk].content_hash == ascii_only.content_hash
        assert rows[decomposed.pk].content_hash == rows[bobs.pk].content_hash != decomposed.content_hash

        migrate_to([("agentmemory", "0034_fulltext_words_as_written")])
        back = {f.pk: f for f in Fact0034.objects.all()}
        assert back[decomposed.pk].content_hash == _old_hash("I live in Zürich")
    finally:
        migrate_to_latest()
    assert Fact.objects.filter(superseded_by__isnull=True, owner__username="alice").count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("\u9996\u9009\u8bed\u8a00\uff1aPython", "\u9996\u9009\u8bed\u8a00\uff1aRust"),  # U+FF1A
        (
            "\u597d\u304d\u306a\u8272\uff1a\u9752",
            "\u597d\u304d\u306a\u8272\uff1a \u8d64",
        ),  # with a space after it
    ],
)
def test_a_key_before_a_full_width_colon_supersedes(old: str, new: str) -> None:
    # Chinese and Japanese write "key\uff1avalue" with the full-width colon and no space: the
    # new value of a key stayed in force beside the old one
    memory = KnowledgeMemory(UserFactory())
    first = memory.store(old).fact
    result = memory.store(new)
    assert result.action == "superseded" and result.superseded_ids == (first.pk,)


@pytest.mark.django_db
def test_a_full_width_clock_time_is_not_a_key() -> None:
    memory = KnowledgeMemory(UserFactory())
    memory.store("\u4f1a\u8b70\u306f14\uff1a30\u304b\u3089")  # "the meeting is from 14\uff1a30"
    assert memory.store("\u4f1a\u8b70\u306f14\uff1a00\u304b\u3089").action == "created"
    assert memory.live_facts().count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_fact_in_force_over_a_newer_expired_or_transient_copy() -> None:
    """Two stored forms of one fact: the one in force (persistent, no expiry) and a newer copy
    that has expired, or a newer one that is only a recent entry. The migration made the
    newest the head and the fact in force its history: the fact left recall (an expired
    head), or became an entry that ages out (a transient head)."""
    from datetime import timedelta

    from django.utils import timezone

    apps = migrate_to([("agentmemory", "0034_fulltext_words_as_written")])
    try:
        User = apps.get_model("auth", "User")
        Fact0034 = apps.get_model("agentmemory", "Fact")
        alice = User.objects.create(username="alice")
        now = timezone.now()

        def make(content, created, **extra):  # type: ignore[no-untyped-def]
            return Fact0034.objects.create(
                owner_id=alice.pk,
                content=content,
                content_hash=_old_hash(content),
                created_at=created,
                **extra,
            )

        in_force = make("Allergic to crème brûlée", now - timedelta(days=30), persistent=True)
        make(unicodedata.normalize("NFD", in_force.content), now - timedelta(days=2), expires_at=now)
        kept = make("Loves Zürich", now - timedelta(days=30), persistent=True)
        make(unicodedata.normalize("NFD", kept.content), now - timedelta(days=2), persistent=False)
        migrate_to([("agentmemory", "0035_fact_repeats_in_any_unicode_form")])
    finally:
        migrate_to_latest()
    live = Fact.objects.live().filter(owner__username="alice")
    assert sorted(live.values_list("content", flat=True)) == ["Allergic to crème brûlée", "Loves Zürich"]
    assert all(live.values_list("persistent", flat=True))
    assert Fact.objects.filter(owner__username="alice", superseded_by__isnull=True).count() == 2


#: one key written two ways, as both databases' indexes see it alike
#: (``recall.text.search_text``): compatibility forms, case folding beyond ASCII, letters
#: Unicode does not decompose, accents and invisible characters
KEY_SPELLINGS = [
    ("\uff25mail: a@example.com", "Email: b@example.com"),  # a full-width letter
    ("Email: a@example.com", "\uff25\uff4d\uff41\uff49\uff4c: b@example.com"),
    ("\ufb01le server: down", "File server: up"),  # the ligature "fi"
    ("File server: down", "\ufb01le server: up"),
    ("Stra\u00dfe: Hauptstra\u00dfe 1", "STRASSE: Hauptstrasse 2"),  # sharp s, upper case SS
    ("STRASSE: Hauptstrasse 2", "Stra\u00dfe: Hauptstra\u00dfe 1"),
    ("\u0130stanbul office: open", "Istanbul office: closed"),  # the Turkish dotted capital I
    ("Istanbul office: open", "\u0130stanbul office: closed"),
    ("Pass\u200bword: hunter2", "Password: hunter3"),  # a zero-width space pasted in
    ("Password: hunter2", "Pass\u200bword: hunter3"),
    ("Caf\u00e9: Flore", "Cafe: Deux Magots"),  # with and without the accent
    ("\u00c4rger: viel", "\u00e4rger: wenig"),  # a non-ASCII letter in another case
    ("Mom\u2019s phone: 555-0101", "Mom's phone: 555-0199"),  # a phone's typographic apostrophe
    ("Mom's phone: 555-0101", "Mom\u2019s phone: 555-0199"),
    ("Dad\u02bcs car: red", "Dad's car: blue"),  # the modifier letter apostrophe
    ("\u202eEmail: a@example.com", "Email: b@example.com"),  # a direction override pasted in
    ("Email: a@example.com", "\u2067Email\u2069: b@example.com"),  # a direction isolate
]


@pytest.mark.django_db
@pytest.mark.parametrize(("old", "new"), KEY_SPELLINGS)
def test_a_key_in_another_spelling_of_the_same_letters_supersedes(old: str, new: str) -> None:
    # the new value stayed in force beside the old one: the key compared NFKC-folded but not
    # case-folded beyond ASCII, and the stored rows were picked by their raw spelling
    memory = KnowledgeMemory(UserFactory())
    first = memory.store(old, "contacts", persistent=True).fact
    result = memory.store(new, "contacts", persistent=True)
    assert result.action == "superseded" and result.superseded_ids == (first.pk,), (old, new)
    assert [f.content for f in memory.live_facts()] == [new]
