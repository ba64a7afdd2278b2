from django.apps import AppConfig


class RegressionsConfig(AppConfig):
    name = "traces.regressions"
    label = "regressions"
    verbose_name = "Regression sets"

    def ready(self):
        # strategies never imports traces: the editor, the release pages and the go-live
        # judgement ask the sets through this hook.
        from strategies.documents.regression_hook import register_regression_checks
        from traces.regressions import selectors  # models are loaded only once apps are ready

        register_regression_checks(
            results=selectors.body_results, refusals=selectors.required_refusals
        )
