"""The API's JSON parser: orjson, which refuses nesting deeper than 1024 levels with a normal
decode error instead of exhausting Python's stack — so absurd input is a 400, never a 500 —
and a key twice in one object (console/kernel/strict_json.py), which orjson would let the
last one win: 400 `duplicate_key` at its path."""

from __future__ import annotations

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from console.kernel import strict_json
from console.kernel.errors import ValidationFailed


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}
        try:
            return strict_json.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ParseError(f"The request body is not valid JSON: {exc}") from None
        except strict_json.DuplicateKey as exc:
            raise ValidationFailed(
                f"The request body is not valid: {exc.message}",
                code=strict_json.DUPLICATE_KEY,
                details=[exc.as_finding()],
            ) from None
