"""Rollback targets: the versions that were live in an environment before, and those that
went live there only unreviewed (break-glass), which never are."""

from __future__ import annotations

from strategies.documents.models import Version
from strategies.releases.models import Release, ReleaseEvent


def rollback_targets(release: Release) -> list[Version]:
    """Versions that were live in this environment before, newest first, except the live one
    and those that only ever went live there unreviewed (`unreviewed_versions`)."""
    ids = (
        ReleaseEvent.objects.moves()
        .filter(release=release, unreviewed=False)
        .values_list("to_version_id", flat=True)
    )
    return list(
        Version.objects.filter(pk__in=ids).exclude(pk=release.version_id).order_by("-number")
    )


def unreviewed_versions(release: Release) -> list[Version]:
    """Versions that went live in this environment only without the approval it normally
    requires (during a break-glass), newest first: never rollback targets."""
    events = ReleaseEvent.objects.moves().filter(release=release)
    reviewed = events.filter(unreviewed=False).values_list("to_version_id", flat=True)
    ids = events.filter(unreviewed=True).values_list("to_version_id", flat=True)
    return list(
        Version.objects.filter(pk__in=ids)
        .exclude(pk__in=reviewed)
        .exclude(pk=release.version_id)
        .order_by("-number")
    )


def rollback_choices(*, release: Release) -> list[Version]:
    return rollback_targets(release)


def unreviewed_releases(*, version: Version) -> list[ReleaseEvent]:
    """The times `version` went live unreviewed (break-glass), newest first: its page says so."""
    return list(
        ReleaseEvent.objects.moves()
        .filter(to_version=version, unreviewed=True)
        .select_related("release__environment")
        .order_by("-occurred_at", "-id")
    )
