"""context_runtime: what the Context Console and an agent runtime share, without Django.

- ``vocabulary``  the document kinds, blocks, sections, switches and limits of the contract
- ``findings``    ``Finding``: one place in some input that is wrong, with a severity
- ``canonical``   canonical JSON and content hashes
- ``text``        text a store can keep: no NUL character, no lone surrogate
- ``manifest``    what a runtime implements, and the check of its wire form
- ``documents``   the one validator per document kind
- ``diff``        field-by-field changes between two bodies, in words
- ``wire``        statuses, decisions and the msgspec structs of a trace batch
- ``engine``      the selection engine: required first, optional by priority, bundles whole,
                  explicit failure statuses (pure, deterministic, no I/O)
- ``client``      the config client: ETag polling, webhook refresh, last good copy in memory
                  and on disk; a read on the request path is a memory read
- ``replay``      the engine again on a trace's recorded candidates: reproduce it, or preview
                  another strategy version on the same request
- ``rollouts``    staged rollouts: a request's arm (the stable hash, one place), the version
                  it serves and the one that runs as its shadow
- ``reporter``    the trace reporter: bounded queue, batches in the background, retries
- ``webhook``     verifying the console's webhook signature
- ``manifest_report``  declaring what the runtime implements, from what it registered
- ``otel``        OpenTelemetry spans and metrics (active with the ``[otel]`` extra; a no-op
                  without it)
- ``adk``         the Google ADK integration (needs the ``[adk]`` extra)

These modules, and the names in each one's ``__all__``, are the public surface; a module whose
name starts with an underscore (``_checks``, ``engine._selection``, ``client._http``…) is
internal and may change without notice. The package is typed (``py.typed``).

The normative contract is ``docs/runtime-contract.md`` in the console's repository.
"""

__version__ = "0.4.0"

# Not "adk": a star import must not need the optional google-adk.
__all__ = [
    "__version__",
    "canonical",
    "client",
    "diff",
    "documents",
    "engine",
    "findings",
    "manifest",
    "manifest_report",
    "otel",
    "replay",
    "reporter",
    "rollouts",
    "text",
    "vocabulary",
    "webhook",
    "wire",
]
