from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: access, audit, runtime tokens"

    def ready(self):
        from django.contrib.auth.signals import user_logged_in  # the sign-in signal, below

        # Registers `manage.py check --deploy`'s check of the database role (console.E101).
        from console.kernel import database_role, sso_providers  # noqa: F401
        from console.kernel.sessions import signed_in  # importable once the apps are ready

        # A wrong OIDC_PROVIDERS stops the start with its reason, not the first sign-in.
        sso_providers.providers()
        # Every sign-in (the console's page, the break-glass admin's, a single sign-on's
        # login()) starts the session's clocks (console.kernel.sessions).
        user_logged_in.connect(signed_in, dispatch_uid="console-session-clocks")
