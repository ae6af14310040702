"""Celery application of the example project, wired the standard Django way.

Start a worker with ``celery -A project worker`` and the scheduler with ``celery -A project
beat``; beat runs ``agentmemory.tasks.sweep_compactions`` every minute, which re-enqueues
compactions that were requested and never ran (the broker was down, a worker died).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "agentmemory-sweep-compactions": {
        "task": "agentmemory.tasks.sweep_compactions",
        "schedule": 60.0,  # seconds
    },
}
