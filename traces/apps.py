from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Selection traces"

    def ready(self):
        # Stored traces refer to their agent and environment: the catalog asks here before
        # deleting one (strategies.catalog.dependents).
        from strategies.catalog import dependents
        from traces import selectors

        dependents.register_references(
            agent=selectors.references_to_agent, environment=selectors.references_to_environment
        )
