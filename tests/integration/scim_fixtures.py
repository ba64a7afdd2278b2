"""SCIM requests as Okta and Entra ID send them, copied from their published docs (ids and
names as in the docs; `{user}` and `{group}` are filled with the ids the console answered).

- Okta: "SCIM 2.0 protocol reference" (developer.okta.com/docs/api/openapi/okta-scim/guides/
  scim-20): userName eq filter, POST, PUT for updates, PATCH replace {"active": false}, group
  push (POST /Groups, PATCH add/remove members, PATCH replace for a rename, DELETE).
- Entra ID: "Tutorial: Develop and plan provisioning for a SCIM endpoint" (learn.microsoft.com/
  entra/identity/app-provisioning/use-scim-to-provision-users-and-groups): capitalised ops,
  the non-existent-user filter probe, externalId eq, `"active": "False"` as a string, group
  member Add/Remove (by value list and by `members[value eq "…"]`), DELETE after soft delete.
"""

from __future__ import annotations

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"

# --- Okta -----------------------------------------------------------------------------------------
OKTA_USER = {
    "schemas": [USER],
    "userName": "test.user@okta.local",
    "name": {"givenName": "Test", "familyName": "User"},
    "emails": [{"primary": True, "value": "test.user@okta.local", "type": "work"}],
    "displayName": "Test User",
    "locale": "en-US",
    "externalId": "00ujl29u0le5T6Aj10h7",
    "groups": [],
    "password": "1mz050nq",
    "active": True,
}
OKTA_USER_PUT = {
    "schemas": [USER],
    "id": "{user}",
    "userName": "test.user@okta.local",
    "name": {"givenName": "Another", "middleName": "Test", "familyName": "User"},
    "emails": [{"primary": True, "value": "test.user@okta.local", "type": "work"}],
    "displayName": "Another User",
    "locale": "en-US",
    "externalId": "00ujl29u0le5T6Aj10h7",
    "groups": [],
    "active": True,
}
OKTA_DEACTIVATE = {
    "schemas": [PATCH],
    "Operations": [{"op": "replace", "value": {"active": False}}],
}
OKTA_GROUP = {"schemas": [GROUP], "displayName": "Test SCIMv2", "members": []}
OKTA_GROUP_ADD = {
    "schemas": [PATCH],
    "Operations": [
        {
            "op": "add",
            "path": "members",
            "value": [{"value": "{user}", "display": "test.user@okta.local"}],
        }
    ],
}
OKTA_GROUP_RENAME = {
    "schemas": [PATCH],
    "Operations": [{"op": "replace", "value": {"id": "{group}", "displayName": "Test SCIMv2 ops"}}],
}
OKTA_GROUP_REMOVE = {
    "schemas": [PATCH],
    "Operations": [{"op": "remove", "path": 'members[value eq "{user}"]'}],
}

# --- Entra ID -------------------------------------------------------------------------------------
ENTRA_PROBE = 'userName eq "non-existent user"'
ENTRA_USER = {
    "schemas": [USER, ENTERPRISE],
    "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
    "userName": "Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1",
    "active": True,
    "emails": [
        {
            "primary": True,
            "type": "work",
            "value": "Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@testuser.com",
        }
    ],
    "meta": {"resourceType": "User"},
    "name": {
        "formatted": "givenName familyName",
        "familyName": "familyName",
        "givenName": "givenName",
    },
    "roles": [],
}
ENTRA_USER_UPDATE = {
    "schemas": [PATCH],
    "Operations": [
        {
            "op": "Replace",
            "path": 'emails[type eq "work"].value',
            "value": "updatedEmail@microsoft.com",
        },
        {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"},
        {"op": "Add", "path": f"{ENTERPRISE}:department", "value": "Payments"},
    ],
}
ENTRA_DISABLE = {
    "schemas": [PATCH],
    "Operations": [{"op": "Replace", "path": "active", "value": "False"}],
}
ENTRA_GROUP = {
    "schemas": [GROUP, "http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/2.0/Group"],
    "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
    "displayName": "displayName",
    "meta": {"resourceType": "Group"},
}
ENTRA_GROUP_ADD = {
    "schemas": [PATCH],
    "Operations": [{"op": "Add", "path": "members", "value": [{"$ref": None, "value": "{user}"}]}],
}
ENTRA_GROUP_REMOVE_BY_VALUE = {
    "schemas": [PATCH],
    "Operations": [
        {"op": "Remove", "path": "members", "value": [{"$ref": None, "value": "{user}"}]}
    ],
}
ENTRA_GROUP_REMOVE_BY_FILTER = {
    "schemas": [PATCH],
    "Operations": [{"op": "Remove", "path": 'members[value eq "{user}"]'}],
}
ENTRA_GROUP_RENAME = {
    "schemas": [PATCH],
    "Operations": [{"op": "Replace", "path": "displayName", "value": "updatedDisplayName"}],
}


def filled(body, **ids):
    """`body` with "{user}"/"{group}" replaced by the ids the console gave."""
    import json

    text = json.dumps(body)
    for name, value in ids.items():
        text = text.replace("{" + name + "}", str(value))
    return json.loads(text)
