from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Selection traces"

    def ready(self):
        # Stored traces refer to their agent and environment: the catalog asks here before
        # deleting one (strategies.catalog.dependents). Both import models: apps are ready now.
        from strategies.catalog.dependents import (
            register_references,
            register_runtime_report_guard,
            register_trace_asker,
        )
        from traces import selectors  # see above: imported once the app registry is ready
        from traces.redaction.rules import runtime_report_redact  # imports models: see above

        register_references(
            agent=selectors.references_to_agent, environment=selectors.references_to_environment
        )
        register_trace_asker(selectors.agent_has_traces)  # the onboarding's last step
        # What a runtime says about itself passes its environment's redaction rules too.
        register_runtime_report_guard(runtime_report_redact)
