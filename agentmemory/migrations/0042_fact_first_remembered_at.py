"""``Fact.first_remembered_at``: when a fact told again (an exact repeat) was first
remembered. A repeat moves ``created_at`` forward (the daily log dates an entry by the last time
it was remembered, and a transient entry ages from then), which made a recall as of a time
before the repeat miss a fact known then; the first time is kept here, set by the first repeat
that moves ``created_at`` (NULL: never moved, ``created_at`` is the first time). A nullable
column without a default: adding it rewrites no row."""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agentmemory', '0041_append_functions_counter_room'),
    ]

    operations = [
        migrations.AddField(
            model_name='fact',
            name='first_remembered_at',
            field=models.DateTimeField(blank=True, help_text="When a fact told again was first remembered (a repeat moves created at, the daily log's date, to the last time); empty: created at.", null=True, verbose_name='first remembered at'),
        ),
    ]
