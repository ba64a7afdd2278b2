from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "traces.health"
    label = "health"
    verbose_name = "Version health"
