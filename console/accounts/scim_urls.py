"""SCIM 2.0 (under /scim/v2/): authenticated by a SCIM token, see console.accounts.scim_api."""

from django.urls import path

from console.accounts import scim_api
from console.kernel.policy import PUBLIC

urlpatterns = [
    path("Users", scim_api.users, name="scim-users"),
    path("Users/<str:pk>", scim_api.user, name="scim-user-detail"),
    path("Groups", scim_api.groups, name="scim-groups"),
    path("Groups/<str:pk>", scim_api.group, name="scim-group-detail"),
    path(
        "ServiceProviderConfig",
        scim_api.service_provider_config,
        name="scim-service-provider-config",
    ),
    path("ResourceTypes", scim_api.resource_types, name="scim-resource-types"),
    path("Schemas", scim_api.schemas, name="scim-schemas"),
]

# Public to the session layer: every request carries a SCIM token instead (401 without).
REQUIRED = {
    "scim-users": PUBLIC,
    "scim-user-detail": PUBLIC,
    "scim-groups": PUBLIC,
    "scim-group-detail": PUBLIC,
    "scim-service-provider-config": PUBLIC,
    "scim-resource-types": PUBLIC,
    "scim-schemas": PUBLIC,
}
