from django.apps import AppConfig


class PreviewsConfig(AppConfig):
    name = "traces.previews"
    label = "previews"
    verbose_name = "Impact previews"

    def ready(self):
        # The publish judgement (strategies.releases) asks whether a preview is required and
        # present here; strategies cannot import traces, so this app registers its answer
        # once the app registry is ready (the pattern of strategies.catalog.dependents).
        from strategies.releases.preview_hook import (
            register_preview_judge,
            register_preview_summary,
        )
        from traces.previews import selectors  # see above: imported once apps are ready

        register_preview_judge(selectors.preview_publish_finding)
        register_preview_summary(selectors.preview_summary)
