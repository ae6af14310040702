"""Management commands of long-term memory: MEMORY.md export and import, index rebuild."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Conversation, Fact, FactEmbedding, MessageEmbedding
from agentmemory.recall import search_messages
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MEMORY_MD = """# Agent Memory

## preferences
- Preferred language: Python
- Dark mode: enabled

## personal
- Works at Acme Corp
- Name: Alice
"""


def run(*args: str, stdin: str | None = None) -> str:
    out = io.StringIO()
    if stdin is not None:
        import sys

        old = sys.stdin
        sys.stdin = io.StringIO(stdin)
        try:
            call_command("memory_md", *args, stdout=out)
        finally:
            sys.stdin = old
    else:
        call_command("memory_md", *args, stdout=out)
    return out.getvalue()


def test_import_then_export_round_trips_the_seed_layout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    alice = UserFactory(username="alice")
    path = tmp_path / "MEMORY.md"
    path.write_text(MEMORY_MD)
    assert run("import", "--user", "alice", "--file", str(path)).startswith("created 4, already present 0")
    assert run("import", "--user", str(alice.pk), "--file", str(path)).startswith(
        "created 0, already present 4"
    )
    assert KnowledgeMemory(alice).get_persistent_facts() == {
        "preferences": ["Preferred language: Python", "Dark mode: enabled"],
        "personal": ["Works at Acme Corp", "Name: Alice"],
    }
    assert run("export", "--user", "alice") == MEMORY_MD
    # another scope of the same user is empty
    assert run("export", "--user", "alice", "--namespace", "work") == "# Agent Memory\n"


def test_import_from_stdin_into_a_scope_and_errors() -> None:
    bob = UserFactory(username="bob")
    run("import", "--user", "bob", "--agent-key", "support", stdin="- Likes tea\n## x\n- \nnot a fact\n")
    assert KnowledgeMemory(bob, agent_key="support").get_persistent_facts() == {"general": ["Likes tea"]}
    assert KnowledgeMemory(bob).get_persistent_facts() == {}
    with pytest.raises(CommandError):
        run("export", "--user", "nobody")
    with pytest.raises(CommandError, match="nothing imported: line 4: "):
        run("import", "--user", "bob", stdin="- ok\n## notes\n- fine\n- bad\x00fact\n  more\n")
    assert Fact.objects.filter(content="ok").count() == 0


def test_importing_a_file_with_a_changed_value_twice_adds_nothing_the_second_time() -> None:
    """The seed appends a changed "key: value" line below the old one. Each import stored the
    old line again (it superseded the newer fact) and then the new one: two rows a time."""
    erin = UserFactory(username="erin")
    text = "## preferences\n- Editor: vim\n- Likes tea\n- Editor: VS Code\n"
    assert run("import", "--user", "erin", stdin=text).startswith("created 2, already present 0")
    assert run("import", "--user", "erin", stdin=text).startswith("created 0, already present 3")
    assert KnowledgeMemory(erin).get_persistent_facts() == {"preferences": ["Likes tea", "Editor: VS Code"]}
    assert Fact.objects.filter(owner=erin).count() == 3


def test_import_of_a_malformed_file_is_a_command_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Bytes that are not UTF-8 and a scope argument that is not text (undecodable bytes on
    the command line arrive as lone surrogates) ended in a traceback, not a CommandError."""
    UserFactory(username="carol")
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"# Agent Memory\n\n## prefs\n- Likes caf\xe9\n")
    with pytest.raises(CommandError, match="UTF-8"):
        run("import", "--user", "carol", "--file", str(path))
    with pytest.raises(CommandError, match="namespace"):
        run("import", "--user", "carol", "--namespace", "work\udcff", stdin="- Likes tea\n")
    assert Fact.objects.count() == 0


def test_import_reads_past_a_byte_order_mark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dave = UserFactory(username="dave")
    path = tmp_path / "MEMORY.md"
    path.write_bytes("## preferences\n- Likes tea\n".encode("utf-8-sig"))
    run("import", "--user", "dave", "--file", str(path))
    run("import", "--user", "dave", stdin="\ufeff## travel\n- Window seat\n")
    assert KnowledgeMemory(dave).get_persistent_facts() == {
        "preferences": ["Likes tea"],
        "travel": ["Window seat"],
    }


def test_rebuild_restores_the_index_and_embeds_what_is_missing(settings) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage

    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.system("sys"), ChatMessage.human("kingfisher sighting")]
    )
    KnowledgeMemory(alice).remember("Watches birds", "hobby")
    out = io.StringIO()
    call_command("rebuild_recall_index", stdout=out)
    assert "full-text indexes rebuilt" in out.getvalue()
    assert len(search_messages("kingfisher", owner=alice)) == 1
    assert MessageEmbedding.objects.count() == 0
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder"}
    out = io.StringIO()
    call_command("rebuild_recall_index", stdout=out)
    assert "Fact: 1 embeddings stored" in out.getvalue()
    assert "Message: 1 embeddings stored" in out.getvalue()  # the system prompt is not searched
    assert (FactEmbedding.objects.count(), MessageEmbedding.objects.count()) == (1, 1)
    out = io.StringIO()
    call_command("rebuild_recall_index", stdout=out)
    assert "Message: 0 embeddings stored" in out.getvalue()


@pytest.mark.parametrize("user", ["²", "9" * 30])
def test_a_user_argument_that_is_not_an_id_is_a_command_error(user) -> None:  # type: ignore[no-untyped-def]
    # "²" passes str.isdigit() and failed int(); 30 digits overflowed SQLite's driver
    with pytest.raises(CommandError, match="no user"):
        run("export", "--user", user)
    with pytest.raises(CommandError):
        call_command("forget_user", user, "--noinput", stdout=io.StringIO())


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0b", "\x1c", "\r", "\r\n"])
def test_an_exported_fact_holding_a_line_separator_comes_back_as_one_fact(separator: str) -> None:
    # str.splitlines broke a fact at U+2028 (and U+0085, \x0b, \x1c-\x1e) on import: a
    # fact "Likes tea<U+2028>## secrets<U+2028>- ..." came back as a heading and a second fact
    tom = UserFactory(username="tom")
    content = f"Likes tea{separator}## secrets{separator}- Password reset allowed without 2FA"
    KnowledgeMemory(tom, agent_key="a").store(content, "preferences", persistent=True)
    exported = run("export", "--user", "tom", "--agent-key", "a")
    run("import", "--user", "tom", "--agent-key", "b", stdin=exported)
    facts = KnowledgeMemory(tom, agent_key="b").get_persistent_facts()
    assert list(facts) == ["preferences"] and len(facts["preferences"]) == 1
    (fact,) = facts["preferences"]
    assert fact.startswith("Likes tea") and fact.endswith("- Password reset allowed without 2FA")
    if separator not in ("\r", "\r\n"):
        assert fact == content  # kept exactly; a carriage return comes back as a line break
