from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: access, audit, runtime tokens"

    def ready(self):
        # Registers `manage.py check --deploy`'s check of the database role (console.E101).
        from console.kernel import database_role, sso_providers  # noqa: F401

        # A wrong OIDC_PROVIDERS stops the start with its reason, not the first sign-in.
        sso_providers.providers()
