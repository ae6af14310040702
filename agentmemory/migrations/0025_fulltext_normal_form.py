"""Full-text indexes of facts and messages hold the content in one normal form
(``agentmemory.recall.text.search_text``: compatibility forms unfolded, diacritics, Hebrew
points and Arabic vowel marks left out), the form queries are made in, and SQLite's tokenizer
keeps combining marks inside words as PostgreSQL's parser does. Words with combining marks
were lost to recall (Indic scripts, Arabic with vowel marks, decomposed "Zu\u0308rich"). Every
stored row is indexed again: on PostgreSQL both tables are rewritten once (the stored
``search_vector`` columns), on SQLite the FTS5 tables are made again (see
``agentmemory.recall.fulltext.install_normal_form``)."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.install_normal_form(schema_editor)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.uninstall_normal_form(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0024_conversation_summary_window"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
