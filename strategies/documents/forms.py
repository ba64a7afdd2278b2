"""Forms of the draft editor and the profile grid. They only translate between what a person
types and a document body; the validator in context_runtime.documents judges the result, so a
typo in a number comes back as a finding at its path (e.g. budget.max_input_tokens)."""

from __future__ import annotations

import json

from context_runtime import vocabulary
from django import forms

from console.kernel import strict_json
from console.kernel.limits import too_large
from strategies.documents.selectors import readable_body

# Form field → path in the strategy body, for the fields the structured editor knows.
LIST_FIELDS = ("required", "optional", "allowed_tools")
NUMBER_FIELDS = {
    "max_extra_reads": ("max_extra_reads",),
    "budget_max_input_tokens": ("budget", "max_input_tokens"),
    "budget_reserve_output_tokens": ("budget", "reserve_output_tokens"),
    "history_max_turns": ("history", "max_turns"),
    "history_compress_after_tokens": ("history", "compress_after_tokens"),
}


def _names(text: str) -> list[str]:
    return [part for part in text.replace(",", " ").split() if part]


def _number(text: str):
    """An integer when it is one; otherwise the text, so the validator names the mistake."""
    text = text.strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        return text


class StrategyFieldsForm(forms.Form):
    """The structured half of the strategy editor."""

    required = forms.CharField(
        required=False, help_text="Sources the answer cannot do without, separated by commas."
    )
    optional = forms.CharField(required=False, help_text="Sources added when the budget allows.")
    allowed_tools = forms.CharField(required=False, help_text="Tools the model may call.")
    on_missing = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One per line: source: handler (e.g. order_delivery: general_policy_only).",
    )
    max_extra_reads = forms.CharField(required=False, help_text="0–10.")
    budget_max_input_tokens = forms.CharField(required=False, label="Max input tokens")
    budget_reserve_output_tokens = forms.CharField(required=False, label="Reserved output tokens")
    history_max_turns = forms.CharField(required=False, label="History: turns kept")
    history_compress_after_tokens = forms.CharField(
        required=False, label="History: compress after (tokens)"
    )

    @classmethod
    def initial_from(cls, body) -> dict:
        body = body if isinstance(body, dict) else {}
        initial = {}
        for name in LIST_FIELDS:
            value = body.get(name)
            initial[name] = ", ".join(map(str, value)) if isinstance(value, list) else ""
        on_missing = body.get("on_missing")
        initial["on_missing"] = (
            "\n".join(f"{k}: {v}" for k, v in on_missing.items())
            if isinstance(on_missing, dict)
            else ""
        )
        for name, path in NUMBER_FIELDS.items():
            value = body
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            initial[name] = "" if value is None else str(value)
        return initial

    def body_over(self, base) -> dict:
        """`base` (the JSON half) with the known fields replaced by what the form says."""
        body = dict(base) if isinstance(base, dict) else {}
        data = self.cleaned_data
        for name in LIST_FIELDS:
            names = _names(data.get(name, ""))
            if names or name in body:
                body[name] = names
        on_missing = {}
        for line in data.get("on_missing", "").splitlines():
            source, _, handler = line.partition(":")
            if source.strip():
                on_missing[source.strip()] = handler.strip()
        if on_missing or "on_missing" in body:
            body["on_missing"] = on_missing
        for name, path in NUMBER_FIELDS.items():
            text = data.get(name, "").strip()
            if len(path) == 1:
                if text:
                    body[path[0]] = _number(text)
                else:
                    body.pop(path[0], None)
                continue
            group = dict(body.get(path[0])) if isinstance(body.get(path[0]), dict) else None
            if text:
                group = group or {}
                group[path[1]] = _number(text)
            elif group is not None:
                group.pop(path[1], None)
            if group is not None:
                body[path[0]] = group
        return body


def parse_json(text: str):
    """(body, None) or (None, finding) for the raw JSON half of the editor."""
    # Pretty-printed JSON may take twice the canonical size; beyond that it is not parsed.
    if len(text.encode()) > vocabulary.MAX_BODY_BYTES * 2:
        return None, too_large("The document", vocabulary.MAX_BODY_BYTES).details[0]
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, {
            "path": "",
            "code": "malformed_json",
            "message": f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
        }
    except RecursionError:
        return None, {
            "path": "",
            "code": "malformed_json",
            "message": "Not valid JSON: it is nested too deeply.",
        }
    repeated = strict_json.duplicate_key(text)
    if repeated is not None:
        return None, repeated.as_finding()
    return body, None


def pretty(body, kind: str = vocabulary.STRATEGY) -> str:
    """The JSON half as people read it: keys in the contract's order, 2-space indent."""
    return json.dumps(readable_body(kind, body), indent=2, ensure_ascii=False)


class NewStrategyForm(forms.Form):
    key = forms.SlugField(
        max_length=100,
        help_text="The task id the runtime uses, e.g. after_sales_consultation.",
    )
    name = forms.CharField(max_length=200, required=False)


STARTER_STRATEGY = {
    "required": [],
    "optional": [],
    "allowed_tools": [],
    "max_extra_reads": 0,
    "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
}


def starter_body(kind: str) -> dict:
    """The body of a document's very first draft."""
    if kind == vocabulary.PROFILE:
        return {"sections": {block: {} for block in vocabulary.BLOCKS}, "switches": {}}
    return json.loads(json.dumps(STARTER_STRATEGY))


def profile_body_from_post(post, *, base: dict, grid: dict) -> dict:
    """The profile body the grid form describes. A toggle that was absent from the body
    and stays off is left out, so saving the grid does not add keys nobody touched."""
    present = set(post.getlist("present"))
    body = {k: v for k, v in base.items() if k not in ("sections", "switches")}
    sections: dict = {}
    for block, _label, rows in grid["blocks"]:
        entries = {}
        for row in rows:
            if post.get(row.name) == "on":
                entries[row.key] = True
            elif row.name in present:
                entries[row.key] = False
        if entries or block in (base.get("sections") or {}):
            sections[block] = entries
    body["sections"] = sections
    switches = {}
    for switch in grid["switches"]:
        name = f"switches.{switch['name']}"
        if switch["kind"] == "bool":
            if post.get(name) == "on":
                switches[switch["name"]] = True
            elif name in present:
                switches[switch["name"]] = False
        elif switch["kind"] == "choice":
            if post.get(name):
                switches[switch["name"]] = post.get(name)
        else:
            names = _names(post.get(name, ""))
            if names or name in present:
                switches[switch["name"]] = names
    base_switches = base.get("switches") if isinstance(base.get("switches"), dict) else {}
    for name, value in base_switches.items():  # switches the grid does not show are kept
        if name not in vocabulary.KNOWN_SWITCHES:
            switches[name] = value
    if switches or "switches" in base:
        body["switches"] = switches
    return body


def field_for_path(path: str) -> str | None:
    """The structured editor's field that shows a finding at `path` (None: JSON only)."""
    head = path.split("[", 1)[0]
    if head in LIST_FIELDS or head == "on_missing" or head.startswith("on_missing."):
        return head.split(".", 1)[0]
    for name, parts in NUMBER_FIELDS.items():
        if head == ".".join(parts):
            return name
    return None


def errors_by_field(findings: list[dict]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {name: [] for name in StrategyFieldsForm.base_fields}
    for finding in findings:
        name = field_for_path(finding["path"])
        if name:
            grouped[name].append(finding["message"])
    return grouped
