"""The API's JSON parser: orjson, which refuses nesting deeper than 1024 levels with a normal
decode error instead of exhausting Python's stack — so absurd input is a 400, never a 500."""

from __future__ import annotations

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ParseError(f"The request body is not valid JSON: {exc}") from None
