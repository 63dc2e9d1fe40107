"""Synthetic tasks: a config plus a pure seeded generator of (inputs, targets) and a metric (spec/benchmarks.md)."""

from regmem.tasks.base import Task, accuracy
from regmem.tasks.mqar import MQAR, MQARConfig, multiquery_ar

# Task registry keyed by short name: name -> constructor taking the task's config.
TASKS = {"mqar": MQAR}

__all__ = ["MQAR", "TASKS", "MQARConfig", "Task", "accuracy", "multiquery_ar"]
