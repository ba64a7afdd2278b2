from django.apps import AppConfig


class StrategiesConfig(AppConfig):
    name = "strategies"
    verbose_name = "Agents, documents, versions and releases"

    def ready(self):
        # The catalog refuses to delete an agent or environment that other jobs' rows refer
        # to, and makes and deletes an agent's documents with it; it asks those jobs through
        # catalog.dependents, which wiring fills (it imports models: only once apps are ready).
        from strategies import wiring

        wiring.register()
