from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "traces.alerts"
    label = "alerts"
    verbose_name = "Standing alerts on context health"
