"""``Fact.first_remembered_at``: when a fact told again (an exact repeat) was first remembered.

A repeat moves ``created_at`` forward (the daily log dates an entry by the last time it was
remembered, and a transient entry ages from then), which made a recall as of a time before the
repeat (``KnowledgeMemory.recall(now=...)``) miss a fact known then. Storage keeps the first
time here, set by the first repeat that moves ``created_at`` (NULL: never moved, and
``created_at`` is the first time). The repeats stored before this migration left no trace of
their first time: their facts keep NULL.

Made only when missing, as the migrations before it: a history repaired with ``migrate
--fake`` back past this migration applies it again without "already exists". A nullable column
without default is added in place on SQLite too (no table rebuild, so the full-text triggers
stay)."""

from django.db import migrations, models

COLUMN = "first_remembered_at"
HELP = (
    "When a fact told again was first remembered (a repeat moves created at, the daily log's date, "
    "to the last time); empty: created at."
)


def _field() -> models.DateTimeField:
    field = models.DateTimeField(blank=True, help_text=HELP, null=True, verbose_name="first remembered at")
    field.set_attributes_from_name(COLUMN)
    return field


def _has_column(schema_editor, table: str) -> bool:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        return COLUMN in {c.name for c in connection.introspection.get_table_description(cursor, table)}


def add_column(apps, schema_editor):
    fact = apps.get_model("agentmemory", "Fact")
    if not _has_column(schema_editor, fact._meta.db_table):
        schema_editor.add_field(fact, _field())


def remove_column(apps, schema_editor):
    fact = apps.get_model("agentmemory", "Fact")
    if _has_column(schema_editor, fact._meta.db_table):
        schema_editor.remove_field(fact, _field())


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0041_append_functions_counter_room"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="fact",
                    name=COLUMN,
                    field=models.DateTimeField(blank=True, help_text=HELP, null=True, verbose_name="first remembered at"),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, remove_column)],
        ),
    ]
