"""Inline media helpers shared by the converters: data URLs and image sizes from file headers.

Image sizes are read from the first bytes of the data (PNG ``IHDR``, GIF logical screen,
JPEG start-of-frame marker, WebP ``VP8``/``VP8L``/``VP8X`` headers), never by decoding the
image, so pricing an image costs microseconds whatever its size.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentmemory.formats.changes import note, placeholder_change

if TYPE_CHECKING:
    from agentmemory.messages import ChatMessage, ContentPart

__all__ = ["AUDIO_FORMATS", "data_url", "image_format", "image_size", "parse_data_url", "with_media_limit"]

_DATA_URL = re.compile(
    r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w.+-]+=[^;,]*)*);base64,", re.ASCII
)

#: OpenAI ``input_audio.format`` <-> MIME type
AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mpeg"}

#: base64 characters decoded to find an image's size; a JPEG's frame header usually sits in
#: the first few kilobytes, after its EXIF block
_HEADER_CHARS = 256 * 1024


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(mime_type, base64 data)`` of a ``data:<mime>;base64,<data>`` URL, else ``None``.

    Only base64 data URLs are recognised (the form OpenAI documents for inline images and
    files); the data is returned as it is, not decoded.
    """
    match = _DATA_URL.match(url)
    if match is None:
        return None
    return match.group("mime") or "", url[match.end() :]


def data_url(mime_type: str, data: str) -> str:
    """``data:<mime>;base64,<data>``."""
    return f"data:{mime_type};base64,{data}"


def _head(data: str) -> bytes:
    chunk = data[:_HEADER_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        return base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        return b""


def image_format(data: str) -> str | None:
    """The MIME type of a base64 PNG, GIF, JPEG or WebP image, read from its first bytes
    (its signature), whatever type it was stored with; ``None`` for any other data."""
    head = _head(data[:64])
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: str) -> tuple[int, int] | None:
    """``(width, height)`` in pixels of a base64 PNG, GIF, JPEG or WebP image, read from its
    header; ``None`` for another format, a malformed header, or a JPEG whose frame header
    lies beyond the first 192 KB."""
    head = _head(data)
    try:
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            width, height = struct.unpack(">II", head[16:24])
        elif head[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", head[6:10])
        elif head[:2] == b"\xff\xd8":
            size = _jpeg_size(head)
            if size is None:
                return None
            width, height = size
        elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            size = _webp_size(head)
            if size is None:
                return None
            width, height = size
        else:
            return None
    except struct.error:
        return None
    if width <= 0 or height <= 0:
        return None
    return width, height


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        (length,) = struct.unpack(">H", head[i + 2 : i + 4])
        # start-of-frame markers (baseline, progressive, ...), not DHT/JPG/DAC
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", head[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and head[20:21] == b"\x2f":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    return None


def with_media_limit(
    messages: Sequence[ChatMessage],
    is_media: Callable[[ChatMessage, ContentPart], bool],
    limit: int,
    *,
    also_placeholder: Callable[[ContentPart, int], str] | None = None,
    limit_reason: str = "",
) -> list[ChatMessage]:
    """``messages`` with the media parts a provider takes only so many of per request
    (``is_media``) kept for the newest ``limit`` of them; older ones are sent as their
    placeholder text (``[image]``), in copies: storage keeps them whole. Stored histories
    carry their images into every later request, and a provider refuses the whole request
    once they pass its count. ``also_placeholder(part, kept)``, told how many media parts are
    sent, may name more parts to send as placeholders by returning why (Anthropic's size
    limits on images, one of them for a request holding many; ``""`` keeps the part). Each
    part sent as its placeholder is noted for the recorded call
    (``agentmemory.formats.changes``: at its message's position in ``messages``, with
    ``limit_reason`` or the reason returned). Returns the list unchanged (the same objects)
    when nothing goes."""
    from agentmemory.messages import ContentPart, PartKind

    found = [
        (i, j, part)
        for i, message in enumerate(messages)
        if message.parts and not message.truncated
        for j, part in enumerate(message.parts)
        if is_media(message, part)
    ]
    dropped = {(i, j): limit_reason for i, j, _part in found[: max(len(found) - limit, 0)]}
    kept = [(i, j, part) for i, j, part in found if (i, j) not in dropped]
    if also_placeholder is not None:
        for i, j, part in kept:
            if reason := also_placeholder(part, len(kept)):
                dropped[(i, j)] = reason
    if not dropped:
        return list(messages)
    result = list(messages)
    for (i, j), reason in sorted(dropped.items()):
        note(placeholder_change(result[i].parts[j].kind), reason, at=(i, j))
    for i in sorted({i for i, _j in dropped}):
        message = result[i]
        parts = tuple(
            ContentPart(PartKind.TEXT, text=part.placeholder) if (i, j) in dropped else part
            for j, part in enumerate(message.parts)
        )
        result[i] = dataclasses.replace(message, parts=parts)
    return result
