from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: access, audit, runtime tokens"

    def ready(self):
        # Registers `manage.py check --deploy`'s check of the database role (console.E101).
        from console.kernel import database_role  # noqa: F401
