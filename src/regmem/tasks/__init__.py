"""Synthetic tasks: a config plus a pure seeded generator of (inputs, targets) and a metric (docs/architecture.md)."""

from regmem.tasks.base import Task, accuracy
from regmem.tasks.mqar import MQAR, MQARConfig, multiquery_ar
from regmem.tasks.online_regression import OnlineRegressionConfig, switching_keys
from regmem.tasks.word_problem import WordProblem, WordProblemConfig

# Task registry keyed by short name: name -> constructor taking the task's config.
TASKS = {"mqar": MQAR, "s5": WordProblem}

__all__ = [
    "MQAR", "TASKS", "MQARConfig", "OnlineRegressionConfig", "Task", "WordProblem", "WordProblemConfig", "accuracy",
    "multiquery_ar", "switching_keys",
]
