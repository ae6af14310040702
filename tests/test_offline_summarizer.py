"""The offline compactor: labelled, bounded, accumulating like an LLM summary would, and built
from the messages themselves (no prompt is parsed)."""

import pytest
from django.test import override_settings

from agentmemory.compaction import LLMMemoryCompactor, OfflineMemoryCompactor, build_compactor
from agentmemory.llm.offline import OFFLINE_LABEL, OFFLINE_MODEL
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation
from agentmemory.tokens import ApproximateTokenCounter
from tests.factories import conversation_with_turns


def _summarise(previous: str | None, messages: list[ChatMessage], max_tokens: int = 300) -> str:
    compactor = OfflineMemoryCompactor(None, 1, None, max_summary_tokens=max_tokens)
    draft = compactor.summarize(previous, messages)
    assert draft.model == OFFLINE_MODEL and draft.input_tokens == draft.output_tokens == 0
    return draft.text


def test_output_says_it_is_not_an_llm_summary() -> None:
    text = _summarise(None, [ChatMessage.human("Where is order 1042?")])
    assert text.startswith(OFFLINE_LABEL)
    assert "Where is order 1042?" in text


def test_previous_offline_items_and_tools_are_kept() -> None:
    first = _summarise(None, [ChatMessage.human("Where is order 1042?")])
    calls = [ToolCall(id="c1", name="lookup_order", arguments={"order_id": "1042"})]
    second = _summarise(first, [ChatMessage.human("Cancel it."), ChatMessage.ai(None, calls)])
    assert "Where is order 1042?" in second and "Cancel it." in second and "lookup_order" in second


def test_a_previous_llm_summary_is_carried_forward() -> None:
    text = _summarise("The user (Chen Jackson) wants a refund for order 7.", [ChatMessage.human("Any news?")])
    assert "Chen Jackson" in text and "Any news?" in text


def test_output_stays_within_the_stated_limit() -> None:
    messages = [ChatMessage.human(f"question number {i} about the delivery of my order") for i in range(200)]
    text = _summarise(None, messages, max_tokens=100)
    assert ApproximateTokenCounter().count_text(text) <= 100
    assert "question number 199" in text  # the newest items are the ones kept


def test_text_that_looks_like_the_prompt_is_summarised_as_text() -> None:
    # The old offline model parsed the prompt's wording, so a user message that looked like
    # a prompt line ("User: ...", "- item") was taken for structure; now it is just text.
    text = _summarise(None, [ChatMessage.human("User: pretend\n- not an item\nPrevious summary: none")])
    assert text.count("\n- ") == 1
    assert "User said: User: pretend - not an item Previous summary: none" in text


@pytest.mark.django_db
def test_offline_compactor_is_used_when_no_model_is_configured(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    conv, _ = conversation_with_turns(3)
    with override_settings(AGENTMEMORY={}):
        compactor = build_compactor(conv.pk)
        assert type(compactor) is OfflineMemoryCompactor and compactor.llm is None
        summary = compactor.compact()
    assert summary is not None and summary.text.startswith(OFFLINE_LABEL)
    assert summary.model == OFFLINE_MODEL
    assert Conversation.objects.get(pk=conv.pk).summary == summary
    with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.FixedSummaryModel"}):
        assert type(build_compactor(conv.pk)) is LLMMemoryCompactor


# -- facts found without a model ------------------------------------------------------------------


def _facts(text: str, **metadata: str) -> list[tuple[str, str]]:
    from agentmemory.llm.offline import extract_facts

    return [
        (f.category, f.content) for f in extract_facts([ChatMessage.human(text, metadata=metadata, seq=7)])
    ]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (
            "I'm a nurse at the city hospital.",
            [("personal", 'The user said "I\'m a nurse at the city hospital."')],
        ),
        ("My sister lives in Lisbon.", [("personal", 'The user said "My sister lives in Lisbon."')]),
        (
            "I really love hiking in the Alps.",
            [("preferences", 'The user said "I really love hiking in the Alps."')],
        ),
        ("My favourite food is sushi!", [("preferences", 'The user said "My favourite food is sushi!"')]),
        ("I don't eat meat at all.", [("preferences", 'The user said "I don\'t eat meat at all."')]),
        ("Oh, I adopted a dog last week.", [("events", 'The user said "I adopted a dog last week."')]),
        ("Hey Mel! We bought a house in Porto.", [("events", 'The user said "We bought a house in Porto."')]),
        # no fact: a question, the listener, small talk, hedges, too short
        ("Do I have a meeting today?", []),
        ("I love that you remembered my birthday.", []),
        ("I'm so glad to hear that.", []),
        ("I think it might rain tomorrow.", []),
        ("I'd love to visit Japan someday.", []),
        ("I wanted to say thanks again.", []),
        ("I agree.", []),
        ("The weather is nice today.", []),
    ],
)
def test_offline_rules_find_first_person_facts(text: str, found: list[tuple[str, str]]) -> None:
    assert _facts(text) == found


def test_offline_facts_name_the_speaker_and_date_events_not_states() -> None:
    facts = _facts(
        "I went to a support group yesterday. I have two kids. I moved to Berlin.",
        speaker="Caroline",
        session_date_time="1:56 pm on 8 May, 2023",
    )
    assert facts == [
        ("events", 'Caroline said "I went to a support group yesterday." on 8 May 2023.'),
        ("personal", 'Caroline said "I have two kids."'),
        ("events", 'Caroline said "I moved to Berlin." on 8 May 2023.'),
    ]


def test_offline_facts_come_from_people_not_from_the_assistant() -> None:
    from agentmemory.llm.offline import OFFLINE_FACTS, extract_facts

    assistant = ChatMessage.ai("I moved your booking to Friday.", seq=2)
    person = ChatMessage.ai("I moved to Berlin in May.", seq=3, metadata={"speaker": "Melanie"})
    facts = extract_facts([assistant, person])
    assert [(f.content, f.source_seq, f.extracted_by) for f in facts] == [
        ('Melanie said "I moved to Berlin in May."', 3, OFFLINE_FACTS)
    ]


def test_offline_summary_lines_carry_speakers_and_a_date_when_it_changes() -> None:
    day1 = {"speaker": "Caroline", "session_date_time": "1:56 pm on 8 May, 2023"}
    day2 = {"speaker": "Caroline", "session_date_time": "1:14 pm on 25 May, 2023"}
    first = _summarise(
        None,
        [
            ChatMessage.human("We met in Lisbon.", metadata=day1),
            ChatMessage.human("We went to the beach.", metadata=day1),
        ],
    )
    second = _summarise(first, [ChatMessage.human("Then we flew home to Oslo.", metadata=day2)])
    assert second.splitlines()[1:] == [
        "- [8 May 2023] Caroline said: We met in Lisbon.",
        "- Caroline said: We went to the beach.",
        "- [25 May 2023] Caroline said: Then we flew home to Oslo.",
    ]
    # the oldest lines dropped to fit: one line keeps their count and day, and the newest
    # line kept still shows its date
    tight = _summarise(second, [], max_tokens=56)
    assert tight.splitlines()[1:] == [
        "- Left out to fit: 2 earlier lines, said on 8 May 2023",
        "- [25 May 2023] Caroline said: Then we flew home to Oslo.",
    ]
    # folded again, what was left out adds up
    again = _summarise(tight, [ChatMessage.human("Back at work.", metadata=day2)], max_tokens=56)
    assert again.splitlines()[1:] == [
        "- Left out to fit: 3 earlier lines, said on 8 May 2023; 25 May 2023",
        "- [25 May 2023] Caroline said: Back at work.",
    ]


def test_offline_rules_skip_how_someone_has_been_but_keep_what_they_have_been_doing() -> None:
    assert _facts("I've been doing great lately, really.") == []
    assert _facts("I've been so stressed at work.") == []
    assert _facts("I've been volunteering at the animal shelter.") == [
        ("personal", 'The user said "I\'ve been volunteering at the animal shelter."')
    ]


def test_a_user_statement_is_said_and_a_question_asked() -> None:
    # "User asked: I moved to Lisbon." read as a question in the summary the model is sent.
    from agentmemory.llm.offline import extractive_items

    items = extractive_items(
        [
            ChatMessage.human("I moved to Lisbon in March."),
            ChatMessage.human("Where should I eat tonight?"),
            ChatMessage.human("Is the museum open ('today')? "),
            ChatMessage.human("東京の天気は\uff1f"),
        ]
    )
    assert items == [
        "User said: I moved to Lisbon in March.",
        "User asked: Where should I eat tonight?",
        "User asked: Is the museum open ('today')?",
        "User asked: 東京の天気は\uff1f",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Where should I eat tonight?\r\n",  # a Windows line ending
        "Where should I eat tonight?\u00a0",  # a no-break space
        "東京の天気は\uff1f\u3000",  # an ideographic space
        "「本当ですか\uff1f」",  # a corner bracket closes the quotation
        "He said «are you coming?»",
        "أين تسكن؟",  # the Arabic question mark
        "You sold the house?!",
        "You sold the house‽",
    ],
)
def test_a_question_is_asked_whatever_closes_it(text) -> None:  # type: ignore[no-untyped-def]
    # Only " \t\n" and ASCII and curly closing quotes were passed over, and only "?" and U+FF1F
    # counted, so these questions were told to the model as statements ("User said:").
    from agentmemory.llm.offline import extractive_items

    assert extractive_items([ChatMessage.human(text)])[0].startswith("User asked: ")


@pytest.mark.parametrize("text", ["Stop!", '"""', "\x00", "?\x00x", "Is it? No, it is not.", "x" * 10**6])
def test_a_statement_is_said(text) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.llm.offline import extractive_items

    assert extractive_items([ChatMessage.human(text)])[0].startswith("User said: ")


def test_fitting_a_long_fold_parses_each_date_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The default summariser (no model configured) folds up to 8,000 tokens of messages per
    # call: fitting them read every dropped line's date again for each line it tried, 250,000
    # dates for 700 messages, 7 s of a 9 s compaction run of an imported conversation.
    from datetime import datetime, timedelta

    from agentmemory.llm import offline

    parsed = []

    class Counting(datetime):
        @classmethod
        def strptime(cls, text: str, fmt: str) -> datetime:  # type: ignore[override]
            parsed.append(text)
            return datetime.strptime(text, fmt)

    monkeypatch.setattr(offline, "datetime", Counting)
    offline._day.cache_clear()
    start = datetime(2023, 5, 8, 13, 56)
    messages = [
        ChatMessage.human(
            f"On this day I walked to place number {i}.",
            metadata={
                "speaker": "Ann",
                "session_date_time": f"{start + timedelta(days=i // 4):%I:%M %p on %d %B, %Y}",
            },
        )
        for i in range(400)
    ]
    text = _summarise(None, messages, max_tokens=2_000)

    assert "place number 399" in text and "said on 8 May 2023; 9 May 2023" in text
    # each message's date read once, and each of the 100 days tried once in the five formats
    assert len(parsed) <= 400 + 5 * 100


# -- what the admin says it cost ---------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_says_an_offline_summary_called_no_model(admin_client) -> None:  # type: ignore[no-untyped-def]
    from django.urls import reverse

    from agentmemory.models import Summary

    conv, _ = conversation_with_turns(3)
    offline = OfflineMemoryCompactor(None, conv.pk, None).compact()
    assert offline is not None and offline.text.startswith(OFFLINE_LABEL)
    written = Summary.objects.create(
        conversation=Conversation.objects.create(),
        text="The user asked about order 7.",
        first_seq=1,
        through_seq=2,
        model="gpt-4o-mini",
        llm_calls=2,
    )

    def cost(summary: Summary) -> str:
        page = admin_client.get(reverse("admin:agentmemory_summary_change", args=[summary.pk]))
        assert page.status_code == 200
        body = page.content.decode()
        assert "LLM calls" not in body
        start = body.index("Summariser calls")
        return body[start : body.index("</div>", body.index('class="readonly"', start))]

    assert "no model was called" in cost(offline) and "offline extractive summariser" in cost(offline)
    shown = cost(written)
    assert shown.rstrip().endswith(">2") and "no model" not in shown


@pytest.mark.parametrize(
    "text",
    [
        # what a greeting's words take is a condition or a dream: the rest alone is no fact
        "Hello in my dreams, I live in Paris.",
        "Hey if I win, I move to Lisbon.",
        "Thanks but if it works, I'm moving to Berlin.",
        "Hi, when I retire, I'm moving to Portugal.",
    ],
)
def test_offline_rules_never_drop_a_condition_with_a_greeting(text: str) -> None:
    """The greeting rule took up to 30 characters after "Hello", "Hey" or "Thanks" up to a
    comma, whatever they said: "Hello in my dreams, I live in Paris." was kept as the user
    saying "I live in Paris."."""
    assert _facts(text) == []


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("Well\u2026 I moved to Lisbon last year.", "I moved to Lisbon last year."),
        ("Okay\u2014I moved to Lisbon last year.", "I moved to Lisbon last year."),
        ("Hey \u2014 I moved to Lisbon last year.", "I moved to Lisbon last year."),
        ("Hello\u2026 I moved to Lisbon last year.", "I moved to Lisbon last year."),
        ("Oh \u2013 I moved to Lisbon last year.", "I moved to Lisbon last year."),
        ("Thanks for asking, I moved to Lisbon last year.", "I moved to Lisbon last year."),
        (
            "Hey Mel, I\u2019m a nurse at the city hospital\u2026",
            "I\u2019m a nurse at the city hospital\u2026",
        ),
    ],
)
def test_offline_statements_start_on_the_sentences_first_word(text: str, statement: str) -> None:
    """An ellipsis or a dash after an interjection or a greeting opened the quote
    ('The user said "\u2026 I moved to Lisbon last year."'), or the greeting took the whole
    sentence up to its full stop and no fact was kept."""
    facts = _facts(text)
    assert len(facts) == 1 and facts[0][1].startswith(f'The user said "{statement}"'), facts
