"""``Fact.superseded_at``: when a fact stopped being the current one, so that recall as of an
earlier time (``KnowledgeMemory.recall(now=...)``) still finds it.

Storage sets it when a fact is superseded (the time the fact replacing it was said). Facts
superseded before this migration get the time their successor was stored, and never one
before their own (the history chain keeps only the newest successor: for a fact replaced
twice this is the later time, an approximation of history written before the column).

Made only when missing and filled only where empty, as the migrations before it replace what
they make: a history repaired with ``migrate --fake`` back past this migration applies it
again without "already exists". A nullable column without default is added in place on
SQLite too (no table rebuild, so the full-text triggers stay)."""

from django.db import migrations, models

COLUMN = "superseded_at"


def _field() -> models.DateTimeField:
    field = models.DateTimeField(blank=True, null=True, verbose_name="superseded at")
    field.set_attributes_from_name(COLUMN)
    return field


def _has_column(schema_editor, table: str) -> bool:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        return COLUMN in {c.name for c in connection.introspection.get_table_description(cursor, table)}


def add_column(apps, schema_editor):
    fact = apps.get_model("agentmemory", "Fact")
    table = fact._meta.db_table
    if not _has_column(schema_editor, table):
        schema_editor.add_field(fact, _field())
    quote = schema_editor.connection.ops.quote_name
    larger = "GREATEST" if schema_editor.connection.vendor == "postgresql" else "MAX"
    schema_editor.execute(
        f"UPDATE {quote(table)} SET {COLUMN} = {larger}({quote('created_at')}, (SELECT s.{quote('created_at')} "
        f"FROM {quote(table)} AS s WHERE s.{quote('id')} = {quote(table)}.{quote('superseded_by_id')})) "
        f"WHERE {quote('superseded_by_id')} IS NOT NULL AND {COLUMN} IS NULL"
    )


def remove_column(apps, schema_editor):
    fact = apps.get_model("agentmemory", "Fact")
    if _has_column(schema_editor, fact._meta.db_table):
        schema_editor.remove_field(fact, _field())


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0039_fact_category_composed"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="fact",
                    name=COLUMN,
                    field=models.DateTimeField(blank=True, null=True, verbose_name="superseded at"),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, remove_column)],
        ),
    ]
