"""Numbers in the LangGraph app's JSON columns that no Python value holds never make a read
fail, as in the core's (``tests/test_stored_json_numbers.py``).

The core's JSON columns decode with ``StoredJSONDecoder`` (``StoredJSONField``); the LangGraph
app's checkpoint metadata, channel versions and store values were plain ``JSONField``s: an
integer of 5,000 digits written there by hand (PostgreSQL's ``jsonb`` holds it; Python refuses
to convert more than 4,300 digits) made every read of the row fail with ``ValueError``: the
saver's ``get_tuple`` and ``list``, the store's ``get`` and ``search``, and the admin's lists
(500s).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from agentmemory.contrib.langgraph import DjangoSaver, DjangoStore
from agentmemory.contrib.langgraph.models import Checkpoint, StoreItem

pytestmark = pytest.mark.django_db

DIGITS_5000 = "5" + "0" * 4999


def _write(table: str, column: str, pk: int, text: str) -> None:
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s{cast} WHERE id = %s", [text, pk])


def _assert_admin_pages_answer(admin_client, model: str, pk: int) -> None:  # type: ignore[no-untyped-def]
    """The model's admin list and the row's change page answer 200 (no 500)."""
    admin_client.raise_request_exception = False
    assert admin_client.get(reverse(f"admin:agentmemory_langgraph_{model}_changelist")).status_code == 200
    assert (
        admin_client.get(reverse(f"admin:agentmemory_langgraph_{model}_change", args=[pk])).status_code == 200
    )


def test_a_store_value_holding_a_huge_number_is_read(admin_client) -> None:  # type: ignore[no-untyped-def]
    store = DjangoStore()
    store.put(("users", "alice"), "prefs", {"theme": "dark", "n": 1})
    item = StoreItem.objects.get()
    _write(StoreItem._meta.db_table, "value", item.pk, f'{{"theme": "dark", "n": {DIGITS_5000}}}')
    got = store.get(("users", "alice"), "prefs")
    assert got is not None and got.value == {"theme": "dark", "n": DIGITS_5000}
    assert [found.key for found in store.search(("users",))] == ["prefs"]
    _assert_admin_pages_answer(admin_client, "storeitem", item.pk)


def test_checkpoint_metadata_holding_a_huge_number_is_read(admin_client) -> None:  # type: ignore[no-untyped-def]
    from langgraph.checkpoint.base import empty_checkpoint

    saver = DjangoSaver()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    row = Checkpoint.objects.get()
    _write(Checkpoint._meta.db_table, "metadata", row.pk, f'{{"source": "input", "step": {DIGITS_5000}}}')
    _write(Checkpoint._meta.db_table, "channel_versions", row.pk, f'{{"x": {DIGITS_5000}}}')
    found = saver.get_tuple(config)
    assert found is not None and found.metadata["step"] == DIGITS_5000
    assert len(list(saver.list(config))) == 1
    _assert_admin_pages_answer(admin_client, "checkpoint", row.pk)


def test_checkpoint_metadata_that_is_no_object_is_listed(admin_client) -> None:  # type: ignore[no-untyped-def]
    from langgraph.checkpoint.base import empty_checkpoint

    DjangoSaver().put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    Checkpoint.objects.update(metadata=[1, "a"])
    admin_client.raise_request_exception = False
    assert admin_client.get(reverse("admin:agentmemory_langgraph_checkpoint_changelist")).status_code == 200
