"""Two first sign-ins of the same new person at once (two tabs, a double click on the
provider's button) make one account, not an error page for the second."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from console.accounts.models import ExternalIdentity
from console.accounts.sso_accounts import ProviderPerson, sso_sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_first_sign_in__twice_at_once__one_account_both_signed_in():
    person = ProviderPerson(
        provider="bank", subject="bob-sub", email="bob@bank.test", username="bob"
    )
    start = threading.Barrier(2)
    users, errors = [], []

    def sign_in():
        try:
            start.wait()
            users.append(sso_sign_in(person=person)[0].pk)
        except Exception as error:  # noqa: BLE001 - the test reports what went wrong
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_in) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    assert len(users) == 2 and users[0] == users[1]
    assert ExternalIdentity.objects.filter(subject="bob-sub").count() == 1
