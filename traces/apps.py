from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Selection traces"

    def ready(self):
        from celery.schedules import crontab

        from console.celery import app

        # This app's periodic jobs; `celery -A console beat` runs them.
        app.conf.beat_schedule.update(
            {
                "traces-purge-expired": {
                    "task": "traces.purge_expired",
                    "schedule": crontab(minute="*/15"),
                },
                "traces-rollup-recent-hours": {
                    "task": "traces.rollup_recent_hours",
                    "schedule": crontab(minute=5),
                },
            }
        )
