from django.apps import AppConfig


class OutcomesConfig(AppConfig):
    name = "traces.outcomes"
    label = "outcomes"
    verbose_name = "Outcomes"
