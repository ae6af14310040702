"""Celery application of the example project, wired the standard Django way.

Start a worker with ``celery -A project worker`` and the scheduler with ``celery -A project
beat``; beat runs ``agentmemory.tasks.sweep_compactions`` every minute, which re-enqueues
compactions that were requested and never ran (the broker was down, a worker died), and
``agentmemory.tasks.purge_expired`` every night, which deletes conversations past their
retention period and expired long-term facts.
"""

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "agentmemory-sweep-compactions": {
        "task": "agentmemory.tasks.sweep_compactions",
        "schedule": 60.0,  # seconds
    },
    "agentmemory-purge-expired": {
        # conversations past AGENTMEMORY["RETENTION_DAYS"] (and its overrides), expired facts
        "task": "agentmemory.tasks.purge_expired",
        "schedule": crontab(hour=3, minute=17),
    },
}
