"""What each job answers the catalog (strategies.catalog.dependents), registered at app start
by StrategiesConfig.ready: the jobs import the catalog, so the catalog cannot import them.
TracesConfig.ready registers what traces answers; the personal tokens of console.accounts
answer here too (they name agents; console has no ready of its own)."""

from console.accounts import personal_tokens
from strategies.catalog import dependents
from strategies.catalog import selectors as catalog
from strategies.delivery import selectors as delivery
from strategies.documents import selectors as documents
from strategies.documents import services as documents_services
from strategies.releases import selectors as releases
from strategies.releases.services.archive import environment_archived_stop
from strategies.runtime import selectors as runtime


def register() -> None:
    dependents.register_references(environment=catalog.references_to_environment)  # manifests
    dependents.register_references(
        agent=releases.references_to_agent, environment=releases.references_to_environment
    )
    dependents.register_references(agent=documents.references_to_agent)
    dependents.register_references(
        agent=runtime.references_to_agent, environment=runtime.references_to_environment
    )
    dependents.register_references(agent=personal_tokens.references_to_agent)
    dependents.register_references(environment=delivery.references_to_environment)
    dependents.register_archive_listener(environment_archived_stop)
    dependents.register_agent_documents(
        dependents.AgentDocuments(
            profile_create=documents_services.profile_create,
            delete_with_agent=documents_services.documents_delete_with_agent,
            prefetch=documents.agent_documents_prefetch,
        )
    )
