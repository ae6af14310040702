"""The admin shows stored JSON (a model call's window changes, a message's tool calls and
metadata, a fact's metadata) indented, with arrays of scalars on one line: a model call whose
memory block quoted 30 messages printed its list of seqs one number per line, a page about
3,700 pixels tall at 1366 wide."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agentmemory.admin.utils import pretty_json
from agentmemory.models import ModelCall


def _text(html: str) -> str:
    from html import unescape

    return unescape(html[html.index(">") + 1 : html.rindex("</pre>")])


def test_arrays_of_scalars_are_one_line_and_the_json_is_the_same() -> None:
    value = {"memory": {"seqs": list(range(300)), "items": [{"kind": "fact", "ids": [1, 2]}]}, "b": None}
    text = _text(pretty_json(value))
    assert json.loads(text) == value
    assert len(text.splitlines()) < 20
    assert '"seqs": [0, 1, 2,' in text
    assert '"kind": "fact"' in text  # objects stay indented, one key a line


@pytest.mark.django_db
def test_a_model_calls_page_shows_its_window_changes_compactly(admin_client) -> None:  # type: ignore[no-untyped-def]
    call = ModelCall.objects.create(
        kind="chat", model="m", usage_source="counted", window_changes={"memory_seqs": list(range(1, 301))}
    )
    page = admin_client.get(reverse("admin:agentmemory_modelcall_change", args=[call.pk])).content.decode()
    from html import unescape

    assert '"memory_seqs": [1, 2, 3,' in unescape(page)
