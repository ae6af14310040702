"""Fact categories are stored in Unicode's composed form (NFC), as their content is
(``agentmemory.knowledge.storage.validate_fact``), and filters compose the category they are
given: "perso\u0308nlich" as macOS types it is the category "persönlich". The stored
categories holding a character that is not ASCII (the only ones whose form can change) are
composed here, so a filter or a "key: value" fact written in either form finds them. Running
it again changes nothing (a composed category stays as it is), so a history repaired with
``migrate --fake`` back past it applies it again; going back leaves the categories composed
(the same text)."""

import unicodedata

from django.db import migrations

_NON_ASCII = r"[^\x01-\x7f]"


def compose(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    Fact = apps.get_model("agentmemory", "Fact")
    facts = Fact.objects.using(schema_editor.connection.alias)
    rows = facts.filter(category__regex=_NON_ASCII).values_list("pk", "category")
    changed: dict[str, list[int]] = {}
    for pk, category in rows.iterator(chunk_size=2000):
        composed = unicodedata.normalize("NFC", category)
        if composed != category and len(composed) <= 100:  # the column's length
            changed.setdefault(composed, []).append(pk)
    for composed, ids in changed.items():
        for start in range(0, len(ids), 1000):
            facts.filter(pk__in=ids[start : start + 1000]).update(category=composed)


class Migration(migrations.Migration):
    dependencies = [("agentmemory", "0038_fact_knowledge_block_index")]

    operations = [migrations.RunPython(compose, migrations.RunPython.noop, elidable=False)]
