"""The suite's local OpenID Connect provider (tests/idp): a real oidc-provider under Node.js.
Proved here without the console: discovery, its JWKS, the authorization code flow with PKCE
driven over HTTP, its groups claim, and a key rotation."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import requests

REDIRECT = "http://127.0.0.1:9/callback"  # never fetched: the test reads the code off it


def _code_flow(provider, login: str) -> dict:
    """Authorization code + PKCE over HTTP; returns the token endpoint's answer."""
    meta = provider.discovery()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    query = {
        "response_type": "code",
        "client_id": "console",
        "redirect_uri": REDIRECT,
        "scope": "openid email profile groups",
        "state": state,
        "nonce": nonce,
        "code_challenge": challenge.decode(),
        "code_challenge_method": "S256",
    }
    back = provider.sign_in(
        f"{meta['authorization_endpoint']}?{urlencode(query)}", login, redirect_uri=REDIRECT
    )
    answer = parse_qs(urlsplit(back).query)
    assert answer["state"] == [state]
    token = requests.post(
        meta["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": answer["code"][0],
            "redirect_uri": REDIRECT,
            "client_id": "console",
            "client_secret": "s3cret",
            "code_verifier": verifier,
        },
        timeout=10,
    )
    assert token.status_code == 200, token.text
    return {**token.json(), "nonce": nonce}


def _started(oidc_provider):
    oidc_provider.add_client("console", "s3cret", redirect_uris=[REDIRECT])
    oidc_provider.add_user("alice", sub="alice-1", email="alice@bank.test", groups=["ops"])
    oidc_provider.start()
    return oidc_provider


def test_local_provider__code_flow_with_pkce__signed_id_token_and_groups(oidc_provider):
    provider = _started(oidc_provider)
    meta = provider.discovery()
    assert meta["issuer"] == provider.issuer
    assert "S256" in meta["code_challenge_methods_supported"]
    assert meta["end_session_endpoint"]
    [key] = provider.jwks()["keys"]
    assert "d" not in key  # only the public half is published

    answer = _code_flow(provider, "alice")

    claims = jwt.decode(
        answer["id_token"],
        jwt.PyJWK(key).key,
        algorithms=["RS256"],
        audience="console",
        issuer=provider.issuer,
    )
    assert claims["sub"] == "alice-1" and claims["nonce"] == answer["nonce"]
    userinfo = requests.get(
        meta["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {answer['access_token']}"},
        timeout=10,
    ).json()
    assert userinfo["groups"] == ["ops"] and userinfo["email"] == "alice@bank.test"


def test_local_provider__code_without_its_verifier__refused(oidc_provider):
    """PKCE is real: the token endpoint refuses a code presented without its verifier."""
    provider = _started(oidc_provider)
    meta = provider.discovery()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    query = {
        "response_type": "code",
        "client_id": "console",
        "redirect_uri": REDIRECT,
        "scope": "openid",
        "state": "s",
        "code_challenge": challenge.decode(),
        "code_challenge_method": "S256",
    }
    back = provider.sign_in(
        f"{meta['authorization_endpoint']}?{urlencode(query)}", "alice", redirect_uri=REDIRECT
    )
    code = parse_qs(urlsplit(back).query)["code"][0]
    token = requests.post(
        meta["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": "console",
            "client_secret": "s3cret",
            "code_verifier": secrets.token_urlsafe(48),  # not the one challenged
        },
        timeout=10,
    )
    assert token.status_code == 400 and token.json()["error"] == "invalid_grant"


def test_local_provider__keys_rotated__new_kid_signs_and_old_one_can_stay_published(
    oidc_provider,
):
    provider = _started(oidc_provider)
    [old] = provider.jwks()["keys"]

    provider.rotate_keys(keep_old=True)

    kids = [k["kid"] for k in provider.jwks()["keys"]]
    assert len(kids) == 2 and kids[1] == old["kid"]
    answer = _code_flow(provider, "alice")
    assert jwt.get_unverified_header(answer["id_token"])["kid"] == kids[0]
