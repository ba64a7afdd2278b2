from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "traces.rollouts"
    label = "rollouts"
    verbose_name = "Rollout evidence"
