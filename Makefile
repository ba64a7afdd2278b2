.PHONY: run stop test lint bench

run:   ## install, load the demo world, start web + worker + beat on http://$HOST:$PORT (127.0.0.1:8000); Ctrl-C stops all
	scripts/run.sh

stop:  ## stop what runs from this clone's data dir: a running `make run` and the embedded PostgreSQL and Redis
	.venv/bin/python scripts/embedded.py stop

test:  ## install and run the whole suite (lint, schema, unit, integration, browser)
	scripts/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench: ## performance benchmarks; figures go to docs/PERFORMANCE.md
	scripts/install.sh dev && .venv/bin/python -m tests.bench
