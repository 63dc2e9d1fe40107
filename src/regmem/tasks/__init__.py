"""Synthetic tasks: a config plus a pure seeded generator of (inputs, targets) and a metric (docs/architecture.md)."""

from regmem.tasks.base import Task, accuracy
from regmem.tasks.dag import DAGReachability, DAGReachabilityConfig
from regmem.tasks.formal_languages import LANGUAGE_TASKS, FormalLanguage, FormalLanguageConfig
from regmem.tasks.mad import MAD_SETTINGS, MAD_TASKS
from regmem.tasks.mqar import MQAR, MQARConfig, multiquery_ar
from regmem.tasks.niah import NIAH_TASKS
from regmem.tasks.online_regression import OnlineRegressionConfig, switching_keys
from regmem.tasks.state_tracking import STATE_TRACKING_TASKS
from regmem.tasks.swap import DoublingCurriculum, SwapTracking, SwapTrackingConfig
from regmem.tasks.text import Text, TextConfig
from regmem.tasks.word_problem import WordProblem, WordProblemConfig

# Task registry keyed by short name: name -> constructor taking the task's config.
TASKS = {"mqar": MQAR, **MAD_TASKS, "s5": WordProblem, **NIAH_TASKS, **STATE_TRACKING_TASKS, **LANGUAGE_TASKS,
         "text": Text, "swap": SwapTracking, "dag": DAGReachability}
# Names standing for several tasks on the command line (`regmem suite --tasks mad,s5`).
TASK_GROUPS: dict[str, list[str]] = {"mad": list(MAD_TASKS), "niah": list(NIAH_TASKS),
                                     "state_tracking": list(STATE_TRACKING_TASKS),
                                     "languages": list(LANGUAGE_TASKS)}

__all__ = [
    "MAD_SETTINGS", "MQAR", "TASKS", "TASK_GROUPS", "DAGReachability", "DAGReachabilityConfig", "DoublingCurriculum",
    "FormalLanguage", "FormalLanguageConfig", "MQARConfig", "OnlineRegressionConfig", "SwapTracking",
    "SwapTrackingConfig", "Task", "Text", "TextConfig", "WordProblem", "WordProblemConfig", "accuracy",
    "multiquery_ar", "switching_keys",
]
