"""The two idioms of a write that may lose a race, in one place each.

- `update_or_refuse`: a conditional UPDATE (on the revision the client read, or a state);
  when no row matches, someone else changed it first — refuse with the current state.
- `create_or_refuse`: an INSERT guarded by a unique constraint; the loser of a race is refused.

Of two concurrent writers exactly one wins; the other gets the error its caller builds
(usually a 409 `Conflict` carrying `current`). The database decides, not a read before it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import IntegrityError, transaction

from console.kernel.errors import ApplicationError


def update_or_refuse(queryset, refused: Callable[[], ApplicationError], **changes) -> None:
    """UPDATE exactly one row matching `queryset`, or raise `refused()`."""
    if queryset.update(**changes) != 1:
        raise refused()


def create_or_refuse(model, refused: Callable[[], ApplicationError], **fields):
    """INSERT a row of `model`, or raise `refused()` when a unique constraint says another
    writer got there first. Runs in a savepoint, so the caller's transaction goes on."""
    try:
        with transaction.atomic():
            return model.objects.create(**fields)
    except IntegrityError as exc:
        raise refused() from exc
