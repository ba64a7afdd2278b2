"""The configuration file of one agent (docs/CONFIG_AS_CODE.md): how it is written, and the
strict reading of one, every mistake reported at its path in the file.

Writing is deterministic: sorted keys, 2-space indent, a final newline, and nothing that
differs between consoles (no timestamps, database ids or user names), so the same
configuration is the same bytes wherever it is exported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from context_runtime import vocabulary
from context_runtime.findings import Finding
from context_runtime.text import unstorable_strings

from console.kernel import strict_json
from console.kernel.errors import ValidationFailed
from console.kernel.limits import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    text_findings,
)
from strategies.documents.services import DOCUMENT_KEY

FORMAT = "context-console/agent-config"
FORMAT_VERSION = 1
# An agent's whole history fits many times over (a body is at most 64 KiB); the limit keeps
# one upload from tying up a worker.
MAX_FILE_BYTES = 1024 * 1024

TOP_FIELDS = ("format", "format_version", "agent", "documents", "live")
AGENT_FIELDS = ("key", "name", "description")
DOCUMENT_FIELDS = ("key", "kind", "name", "versions", "draft")
VERSION_FIELDS = ("number", "body", "note")


def file_text(data: dict) -> str:
    """The file as text: sorted keys, 2-space indent, final newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def file_hash(data: dict) -> str:
    """sha256 of the file as this console writes it: the same configuration has the same
    hash however it was formatted when uploaded."""
    return hashlib.sha256(file_text(data).encode()).hexdigest()


# --------------------------------------------------------------------------- the file, read


@dataclass(frozen=True)
class FileVersion:
    number: int
    body: dict
    note: str
    path: str  # where it is in the file, e.g. documents[1].versions[0]


@dataclass(frozen=True)
class FileDocument:
    index: int
    key: str
    kind: str
    name: str
    versions: list[FileVersion]
    draft: FileVersion | None

    @property
    def path(self) -> str:
        return f"documents[{self.index}]"

    def version(self, number: int) -> FileVersion | None:
        return next((v for v in self.versions if v.number == number), None)


@dataclass(frozen=True)
class ConfigFile:
    agent_key: str
    agent_name: str
    agent_description: str
    documents: list[FileDocument]
    live: dict[str, dict[str, int]]  # environment key → document key → file version number
    data: dict = field(repr=False)
    sha256: str = ""


def _finding(path: str, code: str, message: str) -> dict:
    return Finding(path, code, message).as_dict()


class _Reader:
    """Walks the parsed JSON once, collecting every finding instead of stopping at the first."""

    def __init__(self):
        self.findings: list[dict] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.findings.append(_finding(path, code, message))

    def obj(self, value, path: str, fields: tuple[str, ...], *, what: str) -> dict | None:
        if not isinstance(value, dict):
            self.add(path, "invalid_type", f"{what} must be an object.")
            return None
        for name in sorted(set(value) - set(fields), key=str):
            self.add(_join(path, name), "unknown_field", f"Unknown field {name!r}.")
        for name in fields:
            if name not in value:
                self.add(_join(path, name), "required", f"{what} needs {name!r}.")
        return value

    def text(self, value, path: str, *, required: bool = True, max_chars: int = 0) -> str:
        """A string; with `max_chars`, one the documents API would take there too."""
        if not isinstance(value, str):
            if value is not None or required:
                self.add(path, "invalid_type", "Must be a string.")
            return ""
        if required and not value.strip():
            self.add(path, "required", "Must not be empty.")
        if max_chars:
            self.findings += [f.as_dict() for f in text_findings(value, path, max_chars=max_chars)]
        return value

    def number(self, value, path: str) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.add(path, "invalid", "Must be a whole number, 1 or more.")
            return None
        return value


def _join(path: str, name) -> str:
    return f"{path}.{name}" if path else str(name)


def file_parse_text(text: str | bytes) -> dict:
    """The JSON of an uploaded file; malformed JSON, duplicate keys (at their path) or NaN are
    refused (400). Size is checked by the caller (the upload limit)."""

    def no_constant(name):
        raise ValueError(f"{name} is not a JSON number")

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationFailed(
                "The file is not UTF-8 text.",
                code="malformed_file",
                details=[_finding("", "malformed_file", "Save the file as UTF-8.")],
            ) from None
    try:
        data = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        message = f"Not valid JSON: {exc.msg} ({where})."
    except (ValueError, RecursionError) as exc:
        message = f"Not valid JSON: {exc}."
    else:
        repeated = strict_json.duplicate_key(text)
        if repeated is None:
            return data
        raise ValidationFailed(
            f"The file is not valid: {repeated.message}",
            code=strict_json.DUPLICATE_KEY,
            details=[repeated.as_finding()],
        )
    raise ValidationFailed(
        "The file is not valid JSON.",
        code="malformed_file",
        details=[_finding("", "malformed_file", message)],
    )


def file_read(data) -> tuple[ConfigFile | None, list[dict]]:
    """(the file, []) or (None, every finding at its path). Only the file's own structure is
    judged here; bodies are judged by the document validator when the import is planned.
    A file with a string no store keeps (a NUL, a lone surrogate: in a note, a name, a body)
    gets those findings alone, before anything else is read of it, so nothing the apply
    would fail to write is ever planned."""
    unstorable = [f.as_dict() for f in unstorable_strings(data, what="The file")]
    if unstorable:
        return None, unstorable
    reader = _Reader()
    top = reader.obj(data, "", TOP_FIELDS, what="The file")
    if top is None:
        return None, reader.findings
    if top.get("format") != FORMAT:
        reader.add("format", "invalid", f"This is not an agent configuration ({FORMAT}).")
    if "format_version" in top and top.get("format_version") != FORMAT_VERSION:
        reader.add(
            "format_version",
            "unsupported",
            f"This console reads format version {FORMAT_VERSION} only.",
        )
    agent = reader.obj(top.get("agent"), "agent", AGENT_FIELDS, what="The agent") or {}
    agent_key = reader.text(agent.get("key"), "agent.key")
    agent_name = reader.text(
        agent.get("name"), "agent.name", required=False, max_chars=MAX_NAME_CHARS
    )
    agent_description = reader.text(
        agent.get("description"),
        "agent.description",
        required=False,
        max_chars=MAX_DESCRIPTION_CHARS,
    )
    documents = _read_documents(reader, top.get("documents"))
    live = _read_live(reader, top.get("live"), documents)
    if reader.findings:
        return None, reader.findings
    return (
        ConfigFile(
            agent_key=agent_key,
            agent_name=agent_name,
            agent_description=agent_description,
            documents=documents,
            live=live,
            data=data,
            sha256=file_hash(data),
        ),
        [],
    )


def _read_documents(reader: _Reader, value) -> list[FileDocument]:
    if not isinstance(value, list):
        if value is not None:
            reader.add("documents", "invalid_type", "documents must be a list.")
        return []
    documents, seen = [], set()
    for index, raw in enumerate(value):
        path = f"documents[{index}]"
        doc = reader.obj(raw, path, DOCUMENT_FIELDS, what="A document")
        if doc is None:
            continue
        key = reader.text(doc.get("key"), f"{path}.key")
        kind = doc.get("kind")
        if kind not in vocabulary.KINDS:
            reader.add(f"{path}.kind", "invalid_choice", "kind must be strategy or profile.")
        elif kind == vocabulary.PROFILE and key != "profile":
            reader.add(f"{path}.key", "invalid", "The profile's key is 'profile'.")
        elif key and (not DOCUMENT_KEY.fullmatch(key) or (kind != "profile" and key == "profile")):
            reader.add(
                f"{path}.key",
                "invalid",
                "Use lowercase letters, digits and underscores ('profile' is the profile's).",
            )
        if key in seen:
            reader.add(f"{path}.key", "duplicate", f"{key} is in the file twice.")
        seen.add(key)
        name = reader.text(
            doc.get("name"), f"{path}.name", required=False, max_chars=MAX_NAME_CHARS
        )
        versions = _read_versions(reader, doc.get("versions"), path)
        draft = None
        if doc.get("draft") is not None:
            draft = _read_version(reader, doc["draft"], f"{path}.draft")
            last = versions[-1].number if versions else 0
            if draft is not None and draft.number <= last:
                reader.add(
                    f"{path}.draft.number",
                    "invalid",
                    f"The draft comes after the versions: its number must be over {last}.",
                )
        documents.append(
            FileDocument(
                index=index,
                key=key,
                kind=kind if kind in vocabulary.KINDS else "",
                name=name,
                versions=versions,
                draft=draft,
            )
        )
    return documents


def _read_versions(reader: _Reader, value, path: str) -> list[FileVersion]:
    if not isinstance(value, list):
        if value is not None:
            reader.add(f"{path}.versions", "invalid_type", "versions must be a list.")
        return []
    versions: list[FileVersion] = []
    for index, raw in enumerate(value):
        version = _read_version(reader, raw, f"{path}.versions[{index}]")
        if version is None:
            continue
        if versions and version.number <= versions[-1].number:
            reader.add(
                f"{version.path}.number",
                "invalid",
                "Versions are listed oldest first, each number higher than the one before.",
            )
        versions.append(version)
    return versions


def _read_version(reader: _Reader, raw, path: str) -> FileVersion | None:
    version = reader.obj(raw, path, VERSION_FIELDS, what="A version")
    if version is None:
        return None
    number = reader.number(version.get("number"), f"{path}.number")
    body = version.get("body")
    if "body" in version and not isinstance(body, dict):
        reader.add(f"{path}.body", "invalid_type", "body must be an object.")
    note = reader.text(
        version.get("note"), f"{path}.note", required=False, max_chars=MAX_NOTE_CHARS
    )
    if number is None or not isinstance(body, dict):
        return None
    return FileVersion(number=number, body=body, note=note, path=path)


def _read_live(reader: _Reader, value, documents: list[FileDocument]) -> dict:
    if not isinstance(value, dict):
        if value is not None:
            reader.add("live", "invalid_type", "live must be an object: environment → document.")
        return {}
    by_key = {d.key: d for d in documents}
    live: dict[str, dict[str, int]] = {}
    for env_key, entries in value.items():
        path = f"live.{env_key}"
        if not isinstance(entries, dict):
            reader.add(path, "invalid_type", "Must be an object: document key → version number.")
            continue
        live[env_key] = {}
        for doc_key, number in entries.items():
            where = f"{path}.{doc_key}"
            number = reader.number(number, where)
            document = by_key.get(doc_key)
            if document is None:
                reader.add(where, "unknown_document", f"The file has no document {doc_key}.")
            elif number is not None and document.version(number) is None:
                reader.add(
                    where,
                    "unknown_version",
                    f"{doc_key} has no frozen version {number} in the file (only frozen "
                    "versions can be live).",
                )
            elif number is not None:
                live[env_key][doc_key] = number
    return live
