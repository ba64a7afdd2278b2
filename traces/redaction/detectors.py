"""What personal data looks like: the built-in detectors (with their checksums) and the custom
patterns an environment adds, without Django (docs/data-protection.md).

Each detector finds spans of one kind in a string. A built-in one confirms what its regular
expression found with the kind's own check where there is one — a payment card number by the
Luhn sum, an IBAN by its country's length and ISO 7064 mod 97, a Singapore NRIC/FIN by its
check letter — so a look-alike with a wrong checksum is left alone. A custom pattern is
compiled with the `regex` module and run under a timeout; `custom_pattern_problem` says why
one cannot be used (it does not compile, is too long, matches the empty string or ordinary
text, or is catastrophically slow), before it is saved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

__all__ = [
    "BUILTIN",
    "CUSTOM",
    "DETECTOR_LABELS",
    "MAX_PATTERN_CHARS",
    "Detector",
    "RedactionTimeout",
    "builtin_could_match",
    "custom_pattern_problem",
    "iban_valid",
    "luhn_valid",
    "marker",
    "nric_valid",
]

CARD, IBAN, EMAIL, PHONE, NRIC, CUSTOM = "card", "iban", "email", "phone", "nric", "custom"
BUILTIN = (CARD, IBAN, EMAIL, PHONE, NRIC)
DETECTOR_LABELS = {
    CARD: "Payment card numbers (13–19 digits, Luhn checksum)",
    IBAN: "IBAN (country length and mod-97 checksum)",
    EMAIL: "E-mail addresses",
    PHONE: "Phone numbers (E.164; NANP, UK and Singapore national formats)",
    NRIC: "Singapore NRIC/FIN (S, T, F, G, M with its check letter)",
    CUSTOM: "Custom pattern (regular expression)",
}
MAX_PATTERN_CHARS = 300
# A custom pattern gets this long on one string at ingest (seconds); past it, the item is
# refused (`redaction_failed`): never stored unchecked.
CUSTOM_TIMEOUT_SECONDS = 0.05


class RedactionTimeout(Exception):
    """A custom pattern ran out of time on one string."""


def marker(name: str) -> str:
    """What the stored text keeps where a rule's match was."""
    return f"[redacted:{name}]"


# --- checksums -----------------------------------------------------------------------------
def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# ISO 13616 lengths of the countries that issue IBANs (SWIFT registry); an unlisted country
# code is held to the general 15–34 and the checksum.
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30,
    "KZ": 20, "LB": 28, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29,
    "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_valid(compact: str) -> bool:
    """An IBAN without spaces, upper case: its country's length and mod 97 == 1."""
    if not 15 <= len(compact) <= 34 or not compact[:2].isalpha() or not compact[2:4].isdigit():
        return False
    expected = IBAN_LENGTHS.get(compact[:2])
    if expected is not None and len(compact) != expected:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


_NRIC_WEIGHTS = (2, 7, 6, 5, 4, 3, 2)
_NRIC_OFFSET = {"S": 0, "T": 4, "F": 0, "G": 4, "M": 3}
_NRIC_LETTERS = {
    "S": "JZIHGFEDCBA",
    "T": "JZIHGFEDCBA",
    "F": "XWUTRQPNMLK",
    "G": "XWUTRQPNMLK",
    "M": "XWUTRQPNJLK",
}


def nric_valid(text: str) -> bool:
    """A Singapore NRIC/FIN, e.g. S1234567D: prefix, seven digits, the check letter."""
    text = text.upper()
    if len(text) != 9 or text[0] not in _NRIC_OFFSET or not text[1:8].isdigit():
        return False
    total = sum(int(d) * w for d, w in zip(text[1:8], _NRIC_WEIGHTS, strict=True))
    total += _NRIC_OFFSET[text[0]]
    return text[8] == _NRIC_LETTERS[text[0]][total % 11]


# --- finders: each yields (start, end) of the confirmed spans --------------------------------
# Digits with single spaces or hyphens between them, not glued to a letter or digit.
_CARD = re.compile(r"(?<!\w)\d(?:[ -]?\d){12,18}(?!\w)")
_IBAN = re.compile(r"(?<![\w])[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]){11,30}(?![\w])")
_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+[1-9](?:[ .-]?\d){6,14}"  # E.164, separators allowed: +65 9123 4567, +14155550123
    r"|\(\d{3}\) ?\d{3}[-. ]\d{4}|\d{3}[-.]\d{3}[-.]\d{4}"  # NANP: (415) 555-0123, 415-555-0123
    r"|0\d{2,4} \d{3,4} ?\d{3,4}"  # UK: 020 7946 0958, 07700 900123
    r"|[3689]\d{3}[ -]\d{4}"  # Singapore: 9123 4567, 6123-4567
    r")(?!\w)"
)
_NRIC = re.compile(r"(?<!\w)[STFGMstfgm]\d{7}[A-Za-z](?!\w)")
_HAS_DIGIT = re.compile(r"\d")
# What any built-in detector needs: an "@", or seven digits (an NRIC's run, a phone number's
# least, a card's or an IBAN's far more). Most strings of a trace have neither.
_SEVEN_DIGITS = re.compile(r"(?:\d\D*){7}")


def builtin_could_match(text: str) -> bool:
    """False when no built-in detector can find anything in `text` (one cheap test)."""
    return "@" in text or _SEVEN_DIGITS.search(text) is not None


def _cards(text: str):
    for m in _CARD.finditer(text):
        digits = m.group().replace(" ", "").replace("-", "")
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            yield m.span()


def _printed_length(printed: str, characters: int) -> int:
    """How much of `printed` holds its first `characters` non-space characters."""
    count = 0
    for end, ch in enumerate(printed, 1):
        count += ch != " "
        if count == characters:
            return end
    return len(printed)


def _ibans(text: str):
    for m in _IBAN.finditer(text):
        found = m.group()
        compact = found.replace(" ", "").upper()
        length = IBAN_LENGTHS.get(compact[:2])
        if length is not None and len(compact) > length:
            # The pattern ran on into the words after it ("… 3000 AND"): cut at the
            # country's length, where a group of the printed form ends.
            kept = _printed_length(found, length)
            if kept < len(found) and found[kept] != " ":
                continue
            found, compact = found[:kept], compact[:length]
        if iban_valid(compact):
            yield m.start(), m.start() + len(found)


def _emails(text: str):
    for m in _EMAIL.finditer(text):
        yield m.span()


def _phones(text: str):
    for m in _PHONE.finditer(text):
        yield m.span()


def _nrics(text: str):
    for m in _NRIC.finditer(text):
        if nric_valid(m.group()):
            yield m.span()


_FINDERS = {CARD: _cards, IBAN: _ibans, EMAIL: _emails, PHONE: _phones, NRIC: _nrics}
# What a string needs for the detector to find anything: most strings are skipped at once.
# The shortest text each can find (a@b.co; +1234567; S1234567D; 13 digits; an IBAN).
_SHORTEST = {EMAIL: 6, PHONE: 8, NRIC: 9, CARD: 13, IBAN: 15}


@dataclass(frozen=True)
class Detector:
    """One rule's detector: a built-in kind, or a compiled custom pattern."""

    name: str  # the marker's name: the kind, or the custom rule's key
    kind: str
    pattern: str = ""

    def compiled(self):
        return regex.compile(self.pattern) if self.kind == CUSTOM else None

    def spans(self, text: str, compiled=None) -> list[tuple[int, int]]:
        if self.kind == CUSTOM:
            try:
                return [
                    m.span()
                    for m in compiled.finditer(text, timeout=CUSTOM_TIMEOUT_SECONDS)
                    if m.end() > m.start()
                ]
            except TimeoutError as exc:
                raise RedactionTimeout(self.name) from exc
        if len(text) < _SHORTEST[self.kind]:
            return []
        if self.kind == EMAIL:
            if "@" not in text:
                return []
        elif not _HAS_DIGIT.search(text):
            return []
        return list(_FINDERS[self.kind](text))


# --- custom patterns: what is refused before saving ------------------------------------------
# Ordinary text a trace carries: a pattern that matches any of it would redact everything.
ORDINARY_TEXT = (
    "The customer asked about the delivery of an order and the applicable return policy.",
    "required",
    "optional_fits",
    "older product introduction",
    "order:A1042",
    "after_sales_consultation",
    "task_state:T9",
    "policy-P7+terms",
    "context_runtime 0.4.0 rules 1a2b3c4d5e6f",
    "model-x",
    marker("card"),
    marker("custom"),
)
# Inputs that make a backtracking pattern take exponential time: with the timeout, a slow
# pattern is found here instead of at ingest.
_HOSTILE = (
    "a" * 3000 + "!",
    "1" * 3000 + "x",
    "1" * 3000 + "!",
    ("ab" * 1500) + "\n",
    " " * 3000 + "x",
    "x@" * 1500,
    ("aaaa-" * 600) + "!",
)
_PROBE_TIMEOUT_SECONDS = 0.2


def custom_pattern_problem(pattern: str) -> str | None:
    """Why a custom pattern cannot be a rule, in words; None when it can."""
    if not pattern or not pattern.strip():
        return "Give a pattern."
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"A pattern is at most {MAX_PATTERN_CHARS} characters."
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        return f"The pattern does not compile: {exc}."
    try:
        if compiled.search("", timeout=_PROBE_TIMEOUT_SECONDS) is not None:
            return "The pattern matches the empty string: it would match everywhere."
        for text in ORDINARY_TEXT:
            if compiled.search(text, timeout=_PROBE_TIMEOUT_SECONDS) is not None:
                return (
                    f"The pattern matches ordinary text ({text!r}): it would redact "
                    "what is not personal data."
                )
        for text in _HOSTILE:
            compiled.search(text, timeout=_PROBE_TIMEOUT_SECONDS)
    except TimeoutError:
        return (
            "The pattern is too slow: it backtracks catastrophically on long input "
            "(e.g. nested repetition like (a+)+). Simplify it."
        )
    except (RecursionError, MemoryError):
        return "The pattern is too complex to run."
    return None
