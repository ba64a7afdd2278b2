from django.apps import AppConfig


class RegressionsConfig(AppConfig):
    name = "traces.regressions"
    label = "regressions"
    verbose_name = "Regression sets"
