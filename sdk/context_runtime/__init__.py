"""context_runtime: what the Context Console and an agent runtime share, without Django.

- ``vocabulary``  the document kinds, blocks, sections, switches and limits of the contract
- ``findings``    ``Finding``: one place in some input that is wrong, with a severity
- ``canonical``   canonical JSON and content hashes
- ``manifest``    what a runtime implements, and the check of its wire form
- ``documents``   the one validator per document kind
- ``diff``        field-by-field changes between two bodies, in words
- ``wire``        statuses, decisions and the msgspec structs of a trace batch

The normative contract is ``docs/runtime-contract.md`` in the console's repository.
"""

__version__ = "0.1.0"
