"""PostgreSQL: the stored ``search_vector`` columns of facts and messages are computed by
``agentmemory_tsvector(content)``, which indexes the first 100,000 characters of a text whose
whole ``tsvector`` would be over PostgreSQL's 1 MB limit instead of failing the insert
("string is too long for tsvector": a message within ``MAX_MESSAGE_CHARS`` could not be
stored). Both tables are rewritten once; nothing changes on other databases (see
``agentmemory.recall.fulltext.install_long_text_vectors``)."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.install_long_text_vectors(schema_editor)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.uninstall_long_text_vectors(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0016_pinned_seq"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
