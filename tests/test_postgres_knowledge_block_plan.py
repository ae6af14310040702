"""The knowledge block's query on PostgreSQL reads the scope's persistent facts most important
first through an index and stops at its limit: with 100,000 facts of one owner it sorted
every one of them (a parallel sequential scan and a sort, 100 ms of a 170 ms agent turn;
0.25 ms with the index)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.knowledge.text import content_hash
from agentmemory.models import Fact

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_the_knowledge_block_reads_its_facts_through_an_index_without_a_sort(django_user_model) -> None:
    owner = django_user_model.objects.create(username="many-facts")
    texts = [f"Fact number {i} about the harbour." for i in range(2_000)]
    Fact.objects.bulk_create(
        Fact(owner=owner, content=t, content_hash=content_hash(t), persistent=True, importance=(i % 10) / 10)
        for i, t in enumerate(texts)
    )
    memory = KnowledgeMemory(owner.pk)
    with CaptureQueriesContext(connection) as queries:
        memory.build_context()
    block = [q["sql"] for q in queries if '"importance" DESC' in q["sql"] and "LIMIT" in q["sql"]]
    assert len(block) == 1
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agentmemory_fact")
        cursor.execute("EXPLAIN " + block[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "agentmemory_fact_block_idx" in plan and "Sort" not in plan, plan
