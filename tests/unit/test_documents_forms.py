"""The draft editor's structured fields: what a person types becomes a body the validator
judges, and findings land on the field that shows them."""

from __future__ import annotations

from strategies.documents.forms import StrategyFieldsForm, errors_by_field, field_for_path

V3 = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "allowed_tools": ["lookup_order", "search_policy"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "max_extra_reads": 2,
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
    "priority": {"recent_dialogue": 10},
}


def _form(**data) -> StrategyFieldsForm:
    form = StrategyFieldsForm({**StrategyFieldsForm.initial_from(V3), **data})
    assert form.is_valid()
    return form


def test_fields__unchanged__same_body_back():
    assert _form().body_over(V3) == V3


def test_fields__lists_with_commas_and_spaces__names():
    body = _form(required="task_state,  order_delivery  applicable_policy").body_over(V3)
    assert body["required"] == ["task_state", "order_delivery", "applicable_policy"]


def test_fields__number_with_typo__kept_as_text_for_the_validator():
    body = _form(budget_max_input_tokens="8k").body_over(V3)
    assert body["budget"] == {"max_input_tokens": "8k", "reserve_output_tokens": 1000}


def test_fields__emptied_number__field_removed_and_json_only_fields_kept():
    body = _form(max_extra_reads="", on_missing="").body_over(V3)
    assert "max_extra_reads" not in body
    assert body["on_missing"] == {}
    assert body["priority"] == {"recent_dialogue": 10}


def test_field_for_path__nested_and_list_paths__the_field_showing_them():
    assert field_for_path("budget.max_input_tokens") == "budget_max_input_tokens"
    assert field_for_path("optional[0]") == "optional"
    assert field_for_path("on_missing.order_delivery") == "on_missing"
    assert field_for_path("priority.recent_dialogue") is None


def test_errors_by_field__groups_messages():
    grouped = errors_by_field([{"path": "required[1]", "message": "m"}])
    assert grouped["required"] == ["m"] and grouped["optional"] == []
