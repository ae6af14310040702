"""The admin in a real browser (Playwright driving the system's Chromium): log in, read a
tau-bench conversation's transcript, open a tool call and follow it to its result and back,
read the context window page's token bar and legend, search messages. Each page is saved as a
screenshot under ``artifacts/screenshots/`` (``SCREENSHOTS_DIR`` to change it).

Run with ``pytest -m browser`` (``.ci/browser`` does, after installing Debian's ``chromium``).
"""

from __future__ import annotations

import io
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

#: the system's Chromium (Debian's ``chromium`` package); no browser is downloaded
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(
    os.environ.get("SCREENSHOTS_DIR", Path(__file__).resolve().parents[1] / "artifacts" / "screenshots")
)
#: a common laptop screen: the admin's columns must fit it
VIEWPORT = {"width": 1366, "height": 768}
PASSWORD = "browser-test-pw"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session. Missing: a failure in CI, a skip elsewhere."""
    if not shutil.which(CHROMIUM):
        message = f"no Chromium at {CHROMIUM}: apt-get install chromium, or set CHROMIUM_PATH"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)

    # Playwright's sync API runs an event loop in this thread; the test's own database work
    # (fixtures, teardown) is ordinary synchronous code.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def replayed(shared_data: Path, django_user_model: Any) -> Conversation:
    """A superuser and one tau-bench airline run replayed with a 2,500-token window (so it is
    compacted: its transcript shows where summaries end)."""
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    call_command(
        "replay_conversations",
        str(shared_data / "tau-bench-airline-gpt-4o.json"),
        limit=1,
        max_tokens=2500,
        no_progress=True,
        stdout=io.StringIO(),
    )
    conversation = Conversation.objects.get()
    assert conversation.summary_id is not None
    return conversation


@pytest.fixture
def page(browser: Any, live_server: Any, replayed: Conversation) -> Iterator[Any]:
    """A logged-in admin page (through the log-in form)."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    tab.goto(f"{live_server.url}/admin/")
    assert "/admin/login/" in tab.url
    tab.fill("#id_username", "admin")
    tab.fill("#id_password", PASSWORD)
    shot(tab, "01-login")
    tab.click("input[type=submit]")
    expect(tab.locator("#site-name")).to_be_visible()
    assert tab.url == f"{live_server.url}/admin/"
    yield tab
    context.close()


def shot(tab: Any, name: str, **kwargs: Any) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    tab.screenshot(path=str(path), **kwargs)
    return path


def in_viewport(tab: Any, selector: str) -> bool:
    return bool(
        tab.locator(selector).evaluate(
            "e => { const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }"
        )
    )


def test_transcript_tool_call_to_its_result_and_back(
    page: Any, live_server: Any, replayed: Conversation
) -> None:
    page.click("text=Conversations")
    page.click(f"text={replayed.title}")
    expect(page.locator("#transcript")).to_be_visible()
    page.click("#content-main .object-tools >> text=Transcript")
    shot(page, "02-transcript")

    # human, AI, tool and system messages are styled apart
    colours = {
        role: page.locator(f"li.am-msg-{role}").first.evaluate("e => getComputedStyle(e).borderLeftColor")
        for role in ("system", "human", "ai", "tool")
    }
    assert len(set(colours.values())) == 4, colours
    # the long system prompt is folded
    assert page.locator("#msg-1 details.am-fold").get_attribute("open") is None
    # where the summary ends is marked
    assert page.locator("li.am-summary-end").count() >= 1

    # the first tool call answered on this page: folded, then opened
    call = page.locator("details.am-call:has(a.am-to-result[href^='#'])").first
    call_id = call.get_attribute("data-call-id")
    call_anchor = call.get_attribute("id")
    assert call.get_attribute("open") is None
    assert not call.locator("pre.am-args").is_visible()
    call.locator("summary").click()
    assert call.get_attribute("open") is not None
    arguments = call.locator("pre.am-args")
    expect(arguments).to_be_visible()
    assert arguments.inner_text().startswith("{\n  ")  # pretty-printed
    call.scroll_into_view_if_needed()
    shot(page, "03-tool-call-open")

    # follow it to its result
    link = call.locator("a.am-to-result")
    target = link.get_attribute("href")
    link.click()
    assert page.url.endswith(target)
    result = page.locator(target)
    assert result.get_attribute("data-role") == "tool"
    assert in_viewport(page, target)
    assert call_id in result.locator("a.am-back").inner_text()
    shot(page, "04-tool-result")

    # and back to the call
    result.locator("a.am-back").click()
    assert page.url.endswith(f"#{call_anchor}")
    assert in_viewport(page, f"[id='{call_anchor}']")


def test_context_window_page_shows_the_token_bar_and_its_legend(page: Any, replayed: Conversation) -> None:
    page.click("text=Conversations")
    page.click(f"text={replayed.title}")
    page.click("#content-main .object-tools >> text=Context window")
    assert page.locator("h1").inner_text() == "Context window"
    page.fill("#id_max_tokens", "3000")
    page.click("input[value=Build]")
    assert "max_tokens=3000" in page.url

    bar = page.locator(".am-bar")
    expect(bar).to_be_visible()
    total = bar.evaluate("e => e.getBoundingClientRect().width")
    widths = {
        part: bar.locator(f"span.{part}").evaluate("e => e.getBoundingClientRect().width")
        for part in ("system", "summary", "history")
    }
    legend = page.locator("#am-legend").inner_text()
    numbers = {
        label: int(value)
        for label, value in re.findall(r"(System prompt|Summary|History|Free)\s+(\d+)", legend)
    }
    assert set(numbers) == {"System prompt", "Summary", "History", "Free"}, legend
    assert sum(numbers.values()) == 3000
    assert "of 3000 tokens" in legend
    # the bar draws what the legend says (within a pixel per part)
    for part, label in (("system", "System prompt"), ("summary", "Summary"), ("history", "History")):
        assert abs(widths[part] - total * numbers[label] / 3000) < 2 + total / 100, (part, widths, numbers)
    assert numbers["Summary"] > 0  # the replay was compacted
    # the messages sent: the pinned system prompt, the summary, then history
    parts = page.locator("#am-window tbody tr td:first-child").all_inner_texts()
    assert parts[:2] == ["pinned", "summary"]
    shot(page, "05-context-window", full_page=True)


def test_message_search_and_the_list_fits_the_screen(page: Any, replayed: Conversation) -> None:
    page.get_by_role("link", name="Messages", exact=True).first.click()
    table = page.locator("#result_list")
    expect(table).to_be_visible()
    # newest first
    seqs = [
        int(s) for s in page.locator("#result_list td.field-seq, #result_list th.field-seq").all_inner_texts()
    ]
    assert seqs == sorted(seqs, reverse=True) and seqs[0] == replayed.last_seq
    # no column runs off a 1,366 px screen
    overflow = page.locator("#changelist-form .results").evaluate("e => e.scrollWidth - e.clientWidth")
    assert overflow <= 0
    page.fill("#searchbar", "reservation cancel")
    page.press("#searchbar", "Enter")
    assert "q=reservation+cancel" in page.url
    rows = page.locator("#result_list tbody tr")
    assert rows.count() > 0
    shot(page, "06-message-search")
    # a hit opens on its message page, holding both words (any form), and from there the
    # transcript at that message
    page.locator("#result_list th.field-seq a").first.click()
    content = page.locator(".field-content_display .readonly").inner_text().lower()
    assert "reservation" in content and "cancel" in content, content[:300]
    seq = page.locator(".field-seq .readonly").inner_text().strip()
    page.click("text=in the transcript")
    assert page.url.endswith(f"#msg-{seq}")
    assert in_viewport(page, f"#msg-{seq}")
    shot(page, "07-message-in-transcript")


def test_every_list_of_the_app_fits_the_screen(page: Any, replayed: Conversation, live_server: Any) -> None:
    """The app's change lists, with the longest values they show (a conversation is named by
    its cut title and its uuid's first digits, a fact by its text), leave no column off a
    1,366 px screen."""
    from django.contrib.auth import get_user_model

    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.models import ModelCall

    owner = get_user_model().objects.get(username="admin")
    untitled = Conversation.objects.create(owner=owner, agent_key="airline-support-agent")
    titled = Conversation.objects.create(
        owner=owner,
        agent_key="airline-support-agent",
        title="Rebooking a cancelled flight to Lisbon via Madrid",
    )
    for round_ in range(4):
        ModelCall.objects.create(
            kind="chat",
            conversation=untitled if round_ < 3 else titled,
            owner=owner,
            agent_key="airline-support-agent",
            model="gpt-4o-mini-2024-07-18",
            round=round_,
            input_tokens=123_456,
            output_tokens=7_890,
            usage_source="provider",
        )
    memory = KnowledgeMemory(owner, agent_key="airline-support-agent")
    memory.store(
        "The customer prefers aisle seats on long-haul flights and travels with a folding bike",
        "preferences",
        True,
    )
    # a superseded fact (its status the longest word) and a tool name of one long word
    memory.store("Preferred language: Python", "preferences", True)
    memory.store("Preferred language: Rust", "preferences", True)
    tool_name = "update_customer_address_and_delivery_preferences"
    PersistentChatHistory(titled).add_messages(
        [
            ChatMessage.human("Please move my address."),
            ChatMessage.ai(
                None,
                tool_calls=[ToolCall(id="c1", name=tool_name, arguments={})],
            ),
            ChatMessage.tool(
                "done", tool_call_id="c1", name="update_customer_address_and_delivery_preferences"
            ),
        ]
    )
    for name in ("Conversations", "Messages", "Model calls", "Summaries", "Facts"):
        page.goto(f"{live_server.url}/admin/")
        page.get_by_role("link", name=name, exact=True).first.click()
        expect(page.locator("#changelist-form")).to_be_visible()
        overflow = page.locator("#changelist-form .results").evaluate("e => e.scrollWidth - e.clientWidth")
        shot(page, f"08-list-{name.lower().replace(' ', '-')}")
        assert overflow <= 0, (name, overflow)


#: each term of an accounting list and the value after it, where they are not side by side
UNPAIRED = """e => [...e.querySelectorAll('dt')].filter(dt => {
  const dd = dt.nextElementSibling, a = dt.getBoundingClientRect(), b = dd.getBoundingClientRect();
  return !(b.top < a.bottom && a.top < b.bottom && b.left > a.left);  // not on one row, after it
}).map(dt => dt.innerText)"""


def test_the_accounting_keeps_each_value_beside_its_name_at_every_width(
    browser: Any, page: Any, replayed: Conversation, live_server: Any
) -> None:
    """The context-window page's and a model call's "window sent" accounting: a name and its
    value share a row on any screen, not only where the grid happens to get an even number of
    columns (at 1,920 px a value stood under the next row's first name)."""
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.models import ModelCall

    class Recorded(BaseToolCallingAgent, register=False):
        AGENT_KEY = replayed.agent_key
        SYSTEM_PROMPT = "You are the airline's support agent."

    Recorded(llm=ScriptedChatModel(["Your flight is rebooked."])).run(replayed, "Is it rebooked?")
    call = ModelCall.objects.filter(conversation=replayed, kind="chat").latest("pk")
    urls = {
        "context": f"/admin/agentmemory/conversation/{replayed.pk}/context/?memory_recall=on",
        "window": f"/admin/agentmemory/modelcall/{call.pk}/window/",
    }
    for width in (1280, 1366, 1600, 1920, 2560):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in urls.items():
            page.goto(f"{live_server.url}{path}")
            lists = page.locator("dl.am-accounting")
            assert lists.count() >= 1, (name, width)
            for i in range(lists.count()):
                assert lists.nth(i).evaluate(UNPAIRED) == [], (name, width)
        shot(page, f"09-accounting-{width}", full_page=True)
