from django.apps import AppConfig


class StrategiesConfig(AppConfig):
    name = "strategies"
    verbose_name = "Agents, documents, versions and releases"
