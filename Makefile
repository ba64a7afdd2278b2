.PHONY: run test lint bench

run:   ## install, load the demo world, start web + worker + beat on http://127.0.0.1:8000
	scripts/run.sh

test:  ## install and run the whole suite (lint, schema, unit, integration, browser)
	scripts/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench: ## performance benchmarks; figures go to docs/PERFORMANCE.md
	scripts/install.sh dev && .venv/bin/python -m tests.bench
