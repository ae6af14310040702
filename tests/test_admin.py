"""The admin: changelists and pages render, history is read-only, the context-window page
shows the window and budget errors, "Compact now" enqueues on commit, permissions hold."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(admin_user) -> Conversation:  # type: ignore[no-untyped-def]
    """A conversation with a system prompt, a parallel tool exchange and a current summary."""
    conv = Conversation.objects.create(owner=admin_user, agent_key="support", title="Order <7> help")
    history = PersistentChatHistory(conv)
    history.add_messages(
        [
            ChatMessage.system("You are the <b>support</b> agent."),
            ChatMessage.human("Hi, I ordered a lamp."),
            ChatMessage.ai("Happy to help."),
            ChatMessage.human("Where is order 7 and what is the weather in Oslo?"),
            ChatMessage.ai(
                None,
                tool_calls=[
                    ToolCall(
                        id="call_a", name="lookup_order", arguments={"order_id": 7, "fields": ["status"]}
                    ),
                    ToolCall(id="call_b", name="weather", arguments={"city": "Oslo"}),
                ],
            ),
            ChatMessage.tool('{"status": "shipped"}', tool_call_id="call_a", name="lookup_order"),
            ChatMessage.tool("sunny, 21 C", tool_call_id="call_b", name="weather"),
            ChatMessage.ai("Order 7 has shipped, and it is sunny in Oslo.", metadata={"model": "gpt-test"}),
        ]
    )
    summary = Summary.objects.create(
        conversation=conv,
        text="The user ordered a lamp.",
        first_seq=2,
        through_seq=3,
        token_count=6,
        model="offline",
        prompt_version="summary-v1",
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    conv.refresh_from_db()
    return conv


def url(name: str, *args) -> str:  # type: ignore[no-untyped-def]
    return reverse(f"admin:agentmemory_{name}", args=args)


def test_changelists_and_pages_render(admin_client, chat):  # type: ignore[no-untyped-def]
    message = Message.objects.get(conversation=chat, seq=5)
    summary = Summary.objects.get(conversation=chat)
    pages = [
        url("conversation_changelist"),
        url("conversation_change", chat.pk),
        url("conversation_add"),
        url("message_changelist"),
        url("message_changelist") + f"?conversation__id__exact={chat.pk}",
        url("message_changelist") + "?role__exact=tool",
        url("message_change", message.pk),
        url("summary_changelist"),
        url("summary_changelist") + f"?conversation__id__exact={chat.pk}",
        url("summary_change", summary.pk),
    ]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page


def test_conversation_list_shows_counters_and_escapes(admin_client, chat):  # type: ignore[no-untyped-def]
    body = admin_client.get(url("conversation_changelist")).content.decode()
    assert "Order &lt;7&gt; help" in body
    assert "Order <7> help" not in body
    assert ">8<" in body  # message_count column
    assert "icon-yes" in body  # has a summary


def test_conversations_with_one_title_are_told_apart(admin_client, chat):  # type: ignore[no-untyped-def]
    twin = Conversation.objects.create(agent_key="support", title=chat.title)
    untitled = Conversation.objects.create(agent_key="support")
    PersistentChatHistory(twin).add_message(ChatMessage.human("Another lamp."))
    assert str(chat) == f"Order <7> help ({chat.uuid.hex[:8]})" and str(chat) != str(twin)
    assert str(untitled) == f"Conversation {untitled.uuid.hex[:8]}"
    long = Conversation(title="A very long title about a lamp order that went astray")
    assert str(long) == f"{long.title} ({long.uuid.hex[:8]})"
    assert len(long.label(28)) <= 40 and long.label(28).endswith(f"({long.uuid.hex[:8]})")
    messages = admin_client.get(url("message_changelist"))
    column = {
        m.conversation_id: messages.context["cl"].model_admin.conversation_short(m)
        for m in messages.context["cl"].result_list
    }
    assert column[chat.pk] != column[twin.pk] and len(column[chat.pk]) <= 30
    choices = [
        choice["display"]
        for spec in messages.context["cl"].filter_specs
        if getattr(spec, "parameter_name", None) == "conversation__id__exact"
        for choice in spec.choices(messages.context["cl"])
    ]
    assert str(chat) in choices and str(twin) in choices
    conversations = admin_client.get(url("conversation_changelist")).content.decode()
    assert str(chat).replace("<", "&lt;").replace(">", "&gt;") in conversations


def test_conversation_search_by_uuid_and_title(admin_client, chat):  # type: ignore[no-untyped-def]
    other = Conversation.objects.create(title="Unrelated")
    by_uuid = admin_client.get(url("conversation_changelist"), {"q": str(chat.uuid)})
    assert list(by_uuid.context["cl"].result_list) == [chat]
    by_title = admin_client.get(url("conversation_changelist"), {"q": "unrel"})
    assert list(by_title.context["cl"].result_list) == [other]
    # The digits every conversation's name shows ("Title (1a2b3c4d)"), and more of them.
    short = chat.uuid.hex[:8]
    assert f"({short})" in str(chat)
    for digits in (short, short.upper(), str(chat.uuid)[:13], chat.uuid.hex[:31]):
        found = admin_client.get(url("conversation_changelist"), {"q": digits})
        assert list(found.context["cl"].result_list) == [chat], digits
    none = admin_client.get(url("conversation_changelist"), {"q": "0" * 8})
    assert list(none.context["cl"].result_list) == []


def test_conversation_page_links_to_messages_summaries_and_context(admin_client, chat):  # type: ignore[no-untyped-def]
    body = admin_client.get(url("conversation_change", chat.pk)).content.decode()
    assert f"?conversation__id__exact={chat.pk}" in body
    assert url("conversation_context", chat.pk) in body
    assert "8 messages" in body
    assert "The user ordered a lamp." in body
    assert "yes: the first message (seq 1) is a system message" in body
    untitled = Conversation.objects.create(title="no prompt")
    PersistentChatHistory(untitled).add_messages([ChatMessage.human("hi")])
    body = admin_client.get(url("conversation_change", untitled.pk)).content.decode()
    assert "no: the first message is not a system message" in body
    # Cleared (or never used): nothing to pin, said as such.
    PersistentChatHistory(untitled).clear()
    body = admin_client.get(url("conversation_change", untitled.pk)).content.decode()
    assert "no: the conversation holds no messages" in body
    assert "the first message is not a system message" not in body


def test_message_list_is_one_conversation_newest_first(admin_client, chat):  # type: ignore[no-untyped-def]
    other = Conversation.objects.create(title="other")
    PersistentChatHistory(other).add_messages([ChatMessage.human("elsewhere")])
    response = admin_client.get(url("message_changelist"), {"conversation__id__exact": chat.pk})
    rows = list(response.context["cl"].result_list)
    assert [m.seq for m in rows] == list(range(8, 0, -1))
    body = response.content.decode()
    assert "Messages of Order &lt;7&gt; help" in body
    assert "lookup_<wbr>order, weather" in body  # a break opportunity after each "_"
    assert "elsewhere" not in body


def test_admin_query_counts_do_not_grow(admin_client, chat, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(chat)
    for n in range(60):
        history.add_messages([ChatMessage.human(f"q{n}"), ChatMessage.ai(f"a{n}")])
    for i in range(20):
        Conversation.objects.create(title=f"c{i}")
    # session, user, the conversation's title, the agent and conversation filters' choices,
    # a bounded count, one page of rows
    with django_assert_max_num_queries(7):
        response = admin_client.get(url("message_changelist"), {"conversation__id__exact": chat.pk})
    assert len(response.context["cl"].result_list) == 100
    # session, user, bounded count, the page with owners joined, the agent_key filter
    with django_assert_max_num_queries(5):
        assert admin_client.get(url("conversation_changelist")).status_code == 200
    # session, user, conversation, then the builder's reads
    with django_assert_max_num_queries(7):
        assert admin_client.get(url("conversation_context", chat.pk)).status_code == 200


def test_history_is_read_only(admin_client, chat):  # type: ignore[no-untyped-def]
    message = Message.objects.get(conversation=chat, seq=5)
    page = admin_client.get(url("message_change", message.pk)).content.decode()
    assert 'name="_save"' not in page
    assert "&quot;order_id&quot;: 7" in page  # pretty-printed arguments
    assert admin_client.post(url("message_change", message.pk), {"content": "rewritten"}).status_code == 403
    assert admin_client.get(url("message_add")).status_code == 403
    assert admin_client.post(url("message_delete", message.pk), {"post": "yes"}).status_code == 403
    summary = Summary.objects.get(conversation=chat)
    assert admin_client.post(url("summary_change", summary.pk), {"text": "x"}).status_code == 403
    assert admin_client.get(url("summary_add")).status_code == 403
    message.refresh_from_db()
    assert message.content is None


def test_context_window_page_shows_what_the_model_sees(admin_client, chat):  # type: ignore[no-untyped-def]
    response = admin_client.get(url("conversation_context", chat.pk))
    assert response.status_code == 200
    window = response.context["window"]
    assert window is not None
    assert [e["part"] for e in response.context["entries"]][:2] == ["system_prompt", "summary"]
    body = response.content.decode()
    assert "You are the &lt;b&gt;support&lt;/b&gt; agent." in body
    assert "The user ordered a lamp." in body
    assert "lookup_order" in body and "&quot;order_id&quot;: 7" in body
    assert "Order 7 has shipped" in body
    # the window of the example project's support agent, registered under the conversation's key
    assert f"<strong>{window.total_tokens}</strong> / 6000" in body
    assert f"{window.first_seq} &ndash; {window.last_seq}" in body


def test_context_window_page_says_where_the_system_prompt_comes_from(admin_client, chat, admin_user):  # type: ignore[no-untyped-def]
    body = admin_client.get(url("conversation_context", chat.pk)).content.decode()
    assert "pinned at seq 1" in body
    # After clear() the pinned prompt is the first message stored again, whatever its seq.
    history = PersistentChatHistory(chat)
    history.clear()
    history.add_messages([ChatMessage.system("Be brief."), ChatMessage.human("hi")])
    body = admin_client.get(url("conversation_context", chat.pk)).content.decode()
    assert "pinned at seq 9" in body
    # An agent's conversation stores no prompt: the page says so instead of showing none.
    bare = Conversation.objects.create(owner=admin_user, agent_key="support")
    PersistentChatHistory(bare).add_messages([ChatMessage.human("hi")])
    body = admin_client.get(url("conversation_context", bare.pk)).content.decode()
    assert "stores no system prompt" in body
    assert "pinned at seq" not in body


def test_context_window_page_marks_truncated_copies(admin_client, chat, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"OVERSIZED_MESSAGE_POLICY": "truncate"}
    PersistentChatHistory(chat).add_messages([ChatMessage.human("long " * 600)])
    response = admin_client.get(url("conversation_context", chat.pk), {"max_tokens": 200})
    assert response.status_code == 200
    assert response.context["window"].truncated == (9,)
    body = response.content.decode()
    assert "truncated for the context window" in body
    assert "am-badge" in body


def test_context_window_page_does_not_count_cleared_messages_as_left_out(admin_client, chat):  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(chat)
    history.clear()  # seqs 1..8 are gone; the next message is seq 9
    history.add_messages([ChatMessage.human("a new start " * 60), ChatMessage.ai("hello again " * 60)])
    response = admin_client.get(url("conversation_context", chat.pk))
    assert response.status_code == 200
    assert response.context["window"].first_seq == 9
    assert response.context["left_out"] is None
    # Messages of this history that do not fit are still reported, from the oldest stored.
    history.add_messages([ChatMessage.human("short"), ChatMessage.ai("reply")])
    response = admin_client.get(url("conversation_context", chat.pk), {"max_tokens": 200})
    assert response.context["window"].first_seq == 11
    assert response.context["left_out"] == (9, 10)


def test_context_window_page_shows_budget_errors_not_500(admin_client, chat):  # type: ignore[no-untyped-def]
    PersistentChatHistory(chat).add_messages([ChatMessage.human("long " * 600)])
    response = admin_client.get(url("conversation_context", chat.pk), {"max_tokens": 100})
    assert response.status_code == 200
    assert response.context["window"] is None
    assert response.context["budget_error"].seq == 9
    body = response.content.decode()
    assert 'class="error"' in body and "seq=9" in body
    bad = admin_client.get(url("conversation_context", chat.pk), {"max_tokens": "lots"})
    assert bad.status_code == 400  # the form is shown again with the error
    assert "max_tokens must be a whole number" in bad.content.decode()
    assert admin_client.get(url("conversation_context", 987654)).status_code == 404


def test_context_window_page_switches_the_memory_block(admin_client, chat, admin_user, settings):  # type: ignore[no-untyped-def]
    # The page builds what an agent with MEMORY_RECALL_ENABLED sends when asked to, whatever
    # the setting: before, a host with the setting off could never see a block here.
    settings.AGENTMEMORY = {**settings.AGENTMEMORY, "MEMORY_RECALL_ENABLED": False}
    old = Conversation.objects.create(owner=admin_user, agent_key="support", title="Lamp order")
    PersistentChatHistory(old).add_messages(
        [ChatMessage.human("The lamp I ordered is the brass Anglepoise."), ChatMessage.ai("Noted.")]
    )
    PersistentChatHistory(chat).add_messages([ChatMessage.human("Which lamp did I order?")])
    page = url("conversation_context", chat.pk)
    default = admin_client.get(page)
    assert default.status_code == 200 and default.context["window"].memory is None
    # "support" is the example project's SupportAgent, which sends no block
    assert "as the agent sends (off)" in default.content.decode()
    shown = admin_client.get(page, {"memory_recall": "on"})
    assert shown.context["window"].memory_tokens > 0
    assert "memory" in [e["part"] for e in shown.context["entries"]]
    assert "brass Anglepoise" in shown.content.decode()
    assert '<option value="on" selected>' in shown.content.decode()
    # the setting does not change what that agent sends, nor the default shown
    settings.AGENTMEMORY = {**settings.AGENTMEMORY, "MEMORY_RECALL_ENABLED": True}
    assert admin_client.get(page).context["window"].memory is None
    hidden = admin_client.get(page, {"memory_recall": "off"})
    assert hidden.context["window"].memory is None and "brass Anglepoise" not in hidden.content.decode()
    bad = admin_client.get(page, {"memory_recall": "yes please"})
    assert bad.status_code == 400 and "memory_recall must be on or off" in bad.content.decode()


def test_context_window_page_says_which_agent_chose_the_memory_scope(admin_client, admin_user):  # type: ignore[no-untyped-def]
    # The accounting said "(the scope of the agent registered under the conversation's agent
    # key, else of that key)." on every page, so a reader could not tell which rule applied.
    from agentmemory.agent_registry import get

    support = get("support")
    path = f"{support.__module__}.{support.__qualname__}"
    pages = {}
    for key in ("support", "no-such-agent", ""):
        conv = Conversation.objects.create(owner=admin_user, agent_key=key)
        PersistentChatHistory(conv).add_messages([ChatMessage.human("Which lamp did I order?")])
        response = admin_client.get(url("conversation_context", conv.pk), {"memory_recall": "on"})
        assert response.status_code == 200
        pages[key] = response.content.decode()
    assert (
        f"the scope of {path}, the agent registered under agent key &ldquo;support&rdquo;" in pages["support"]
    )
    assert (
        "no agent is registered under agent key &ldquo;no-such-agent&rdquo;: "
        "the conversations and facts of that key" in pages["no-such-agent"]
    )
    assert "the conversation has no agent key" in pages[""]
    for body in pages.values():
        assert "else of that key" not in body


def test_non_staff_users_are_sent_to_the_login_page(client, django_user_model, chat):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("bob", password="pw")
    client.force_login(user)
    for page in [
        url("conversation_changelist"),
        url("conversation_context", chat.pk),
        url("message_changelist"),
    ]:
        response = client.get(page)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_view_permission_cannot_see_the_context_page(client, django_user_model, chat):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(url("conversation_context", chat.pk)).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    assert client.get(url("conversation_context", chat.pk)).status_code == 200


def test_compact_now_runs_after_commit_without_a_broker(
    admin_client, chat, settings, django_capture_on_commit_callbacks
):  # type: ignore[no-untyped-def]
    from tests.factories import conversation_with_turns

    settings.AGENTMEMORY = {"COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor"}
    second, _ = conversation_with_turns(3)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = admin_client.post(
            url("conversation_changelist"),
            {"action": "compact_now", "_selected_action": [chat.pk, second.pk]},
            follow=True,
        )
    assert not Summary.objects.filter(conversation=second).exists()  # nothing runs before the commit
    assert len(callbacks) == 2
    for callback in callbacks:
        callback()
    assert Summary.objects.filter(conversation=second).count() == 1
    assert Conversation.objects.get(pk=chat.pk).summary == chat.summary  # nothing more to fold there
    assert not Conversation.objects.filter(compaction_requested_at__isnull=False).exists()
    body = response.content.decode()
    assert "queued" not in body  # no broker: nothing waits in a queue
    assert "Compaction ran in this process for 2 conversations" in body


def test_compact_now_says_what_happens_in_each_compaction_mode(
    admin_client, chat, settings, monkeypatch, django_capture_on_commit_callbacks
):  # type: ignore[no-untyped-def]
    from agentmemory import tasks

    monkeypatch.setattr(tasks.compact_conversation, "apply_async", lambda *a, **k: None)
    said = {}
    for mode in ("off", "celery"):
        settings.AGENTMEMORY = {"COMPACTION_MODE": mode}
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_client.post(
                url("conversation_changelist"),
                {"action": "compact_now", "_selected_action": [chat.pk]},
                follow=True,
            )
        said[mode] = [str(m) for m in response.context["messages"]]
    # "off" starts nothing: the page says so rather than that a compaction was queued
    assert len(said["off"]) == 1 and "queued" not in said["off"][0]
    assert "COMPACTION_MODE" in said["off"][0] and "compact_conversations" in said["off"][0]
    assert not Summary.objects.filter(conversation=chat).exclude(pk=chat.summary_id).exists()
    assert said["celery"] == ["Compaction queued for 1 conversation, for the Celery worker."]


def test_compact_now_with_a_dead_broker_records_the_failure(
    admin_client, chat, settings, monkeypatch, django_capture_on_commit_callbacks
):  # type: ignore[no-untyped-def]
    from kombu.exceptions import OperationalError

    from agentmemory import tasks

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OperationalError("[Errno 111] Connection refused")

    settings.AGENTMEMORY = {"COMPACTION_MODE": "celery"}
    monkeypatch.setattr(tasks.compact_conversation, "apply_async", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            url("conversation_changelist"),
            {"action": "compact_now", "_selected_action": [chat.pk]},
            follow=True,
        )
    assert response.status_code == 200
    chat.refresh_from_db()
    assert "Connection refused" in chat.compaction_error and chat.compaction_requested_at is not None


def test_delete_confirmation_summarises_and_cascades(admin_client, chat):  # type: ignore[no-untyped-def]
    page = admin_client.get(url("conversation_delete", chat.pk))
    assert page.status_code == 200
    body = page.content.decode()
    assert "8 messages" in body
    assert "#5 ai" not in body  # messages are counted, not listed one by one
    response = admin_client.post(url("conversation_delete", chat.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Conversation.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(conversation_id=chat.pk).exists()
    assert not Summary.objects.filter(conversation_id=chat.pk).exists()


def test_a_conversation_added_in_the_admin_starts_with_empty_metadata(admin_client):  # type: ignore[no-untyped-def]
    page = admin_client.get("/admin/agentmemory/conversation/add/")
    assert page.status_code == 200
    assert page.context["adminform"].form["metadata"].value() in ({}, "{}")  # not null
    for box in ("{}", "", "  "):
        response = admin_client.post(
            "/admin/agentmemory/conversation/add/",
            {"title": f"new {box!r}", "agent_key": "", "metadata": box},
        )
        assert response.status_code == 302, response.context["adminform"].form.errors
        assert Conversation.objects.get(title=f"new {box!r}").metadata == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "page, key",
    [
        ("admin:agentmemory_message_changelist", "conversation__id__exact"),
        ("admin:agentmemory_summary_changelist", "conversation__id__exact"),
        ("admin:agentmemory_modelcall_changelist", "conversation__id__exact"),
        ("admin:agentmemory_fact_changelist", "owner__id__exact"),
    ],
)
@pytest.mark.parametrize("value", ["²", "٣", "99999999999999999999999", "9223372036854775808", "-1", "1e3"])
def test_id_filters_that_are_not_ids_are_refused_not_a_server_error(admin_client, chat, page, key, value):  # type: ignore[no-untyped-def]
    # "²" passes str.isdigit() and fails int(); a number past 2**63 - 1 overflows SQLite.
    response = admin_client.get(reverse(page), {key: value})

    assert response.status_code == 400
    assert "must be an id" in response.content.decode()
    good = admin_client.get(reverse(page), {key: str(chat.pk if "conversation" in key else chat.owner_id)})
    assert good.status_code == 200


@pytest.mark.django_db
def test_the_fact_search_page_takes_an_owner_that_is_not_an_id_as_a_username(admin_client, chat):  # type: ignore[no-untyped-def]
    response = admin_client.get(reverse("admin:agentmemory_fact_recall"), {"owner": "²", "q": "anything"})

    assert response.status_code == 400  # the page, with the error
    assert "No user ²" in response.content.decode()


def test_the_message_list_escapes_tool_names(admin_client, admin_user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=admin_user, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("hi"),
            ChatMessage.ai(None, tool_calls=[ToolCall(id="c1", name="get_weather", arguments={})]),
            ChatMessage.tool("<b>sunny</b>", tool_call_id="c1", name="<script>x_y</script>"),
        ]
    )
    body = admin_client.get(url("message_changelist"), {"conversation__id__exact": conv.pk}).content.decode()
    assert "get_<wbr>weather" in body
    assert "<script>x_" not in body and "&lt;script&gt;x_<wbr>y&lt;/script&gt;" in body
