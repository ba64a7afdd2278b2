"""Checks as JUnit XML, so a CI job can gate a pull request on the sets: one test suite per
set, one test case per member × expectation, named with the member's request id and the
expectation; a failure says what was decided (recorded → checked, item by item); a member
that could not be judged is skipped with why — never passed. A set with no member left (all
removed, or expired by its retention) is one skipped case saying it is empty: a suite with
no case would read as passed."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from traces.regressions import checks

EMPTY_CASE = "(no members left)"
EMPTY_MESSAGE = (
    "empty: the set keeps no request (all removed, or expired by its retention): it checks "
    "nothing. Keep a request in it again."
)


def _case_name(member: checks.MemberResult, result: checks.ExpectationResult) -> str:
    return f"{member.request_id} ({member.environment}): {result.words}"


def _details(result: checks.ExpectationResult) -> str:
    lines = [result.message]
    lines += [
        f"  {d.item} [{d.source}]: recorded {d.recorded} → {d.checked}" for d in result.decisions
    ]
    return "\n".join(lines)


def junit_xml(found) -> str:
    """`found`: the SetChecks of a check (selectors.SetCheck)."""
    suites = ET.Element("testsuites", name="regression sets")
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for set_check in found:
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{set_check.regression_set.name} ({set_check.label})",
        )
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        if set_check.outcome == checks.EMPTY:
            counts["tests"] = counts["skipped"] = 1
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"regressions.{set_check.regression_set.name}",
                name=EMPTY_CASE,
            )
            ET.SubElement(case, "skipped", message=EMPTY_MESSAGE)
        for member in set_check.results:
            for result in member.results:
                counts["tests"] += 1
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"regressions.{set_check.regression_set.name}",
                    name=_case_name(member, result),
                )
                if result.outcome == checks.FAILED:
                    counts["failures"] += 1
                    failure = ET.SubElement(case, "failure", message=result.message, type="failed")
                    failure.text = _details(result)
                elif result.outcome == checks.NOT_CHECKABLE:
                    counts["skipped"] += 1
                    ET.SubElement(case, "skipped", message=f"not checkable: {result.message}")
        for key, value in counts.items():
            suite.set(key, str(value))
            total[key] += value
        suite.set("errors", "0")
    for key, value in total.items():
        suites.set(key, str(value))
    suites.set("errors", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
