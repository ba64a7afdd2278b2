"""The demo world of DEMO.md, in one place: its users (`users`), fixed bodies (`data`),
documents (`documents`), releases (`releases`) and traces (`traces`). `world.load_world`
loads it idempotently; `manage.py load_demo` calls it."""
