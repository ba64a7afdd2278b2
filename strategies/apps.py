from django.apps import AppConfig


class StrategiesConfig(AppConfig):
    name = "strategies"
    verbose_name = "Agents, documents, versions and releases"

    def ready(self):
        # The catalog refuses to delete an agent or environment that other jobs' rows refer
        # to, and makes and deletes an agent's documents with it; those jobs import the
        # catalog, so it asks them through catalog.dependents, filled here.
        from strategies.catalog import dependents
        from strategies.catalog import selectors as catalog
        from strategies.delivery import selectors as delivery
        from strategies.documents import selectors as documents
        from strategies.documents import services as documents_services
        from strategies.releases import selectors as releases
        from strategies.runtime import selectors as runtime

        dependents.register_references(environment=catalog.references_to_environment)
        dependents.register_references(
            agent=releases.references_to_agent, environment=releases.references_to_environment
        )
        dependents.register_references(agent=documents.references_to_agent)
        dependents.register_references(environment=runtime.references_to_environment)
        dependents.register_references(environment=delivery.references_to_environment)
        dependents.register_agent_documents(
            dependents.AgentDocuments(
                profile_create=documents_services.profile_create,
                delete_with_agent=documents_services.documents_delete_with_agent,
                prefetch=documents.agent_documents_prefetch,
            )
        )
