from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: access, audit, runtime tokens"

    def ready(self):
        # Registers `manage.py check --deploy`'s check of the database role (console.E101).
        from console.kernel import database_role  # noqa: F401
        from console.kernel.sso_providers import providers

        # A wrong OIDC_PROVIDERS stops the start with its reason, not the first sign-in.
        providers()
