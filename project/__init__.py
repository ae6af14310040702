"""Example project for agentmemory; imports the Celery app so ``shared_task`` binds to it."""

from project.celery import app as celery_app

__all__ = ("celery_app",)
