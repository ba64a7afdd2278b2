"""A plain Django project — `django-admin startproject`'s settings and default middleware, one
JSON view — the baseline of the config benchmark (tests/bench/bench_config.py). It shares
nothing with the console but Django and the server settings it runs under."""
