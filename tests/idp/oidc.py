"""The local OpenID Connect provider the suite signs in through: tests/idp/oidc_provider.mjs
(npm `oidc-provider`, installed into tests/idp/node_modules by scripts/install.sh), run by
Node.js on a free loopback port. Nothing is downloaded when the tests run.

A test configures it with clients and users (sub, e-mail, groups), rotates its signing key
(a restart with a new first key, the old one still published or not), slows its token
endpoint, or has it tamper with the ID token it issues (to prove the console refuses it).
"""

from __future__ import annotations

import base64
import html
import json
import re
import secrets
import shutil
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.idp.process import LoopbackProcess

IDP_DIR = Path(__file__).resolve().parent
SCRIPT = IDP_DIR / "oidc_provider.mjs"


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def rsa_private_jwk(kid: str | None = None) -> dict:
    """A new RSA signing key as a private JWK (what oidc-provider's `jwks` takes)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = key.private_numbers(), key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "kid": kid or secrets.token_hex(8),
        "use": "sig",
        "alg": "RS256",
        "n": _b64(public.n),
        "e": _b64(public.e),
        "d": _b64(private.d),
        "p": _b64(private.p),
        "q": _b64(private.q),
        "dp": _b64(private.dmp1),
        "dq": _b64(private.dmq1),
        "qi": _b64(private.iqmp),
    }


@dataclass
class User:
    sub: str
    email: str
    groups: list[str] = field(default_factory=list)
    name: str = ""


class LocalOIDCProvider(LoopbackProcess):
    """One oidc-provider process. `issuer` is http://127.0.0.1:<port>."""

    label = "oidc-provider"

    def __init__(self) -> None:
        super().__init__("test-oidc-")
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.keys = [rsa_private_jwk()]
        self.clients: list[dict] = []
        self.users: dict[str, User] = {}
        self.token_delay_ms = 0
        self.tamper: str | None = None
        self._config = self._dir / "config.json"

    # --- configuration ---------------------------------------------------------------------------
    def add_client(
        self, client_id: str, client_secret: str, *, redirect_uris, post_logout_redirect_uris=()
    ) -> None:
        """Register a client; takes effect at the next (re)start."""
        self.clients.append(
            {
                "client_id": client_id,
                "client_secret": client_secret,
                "redirect_uris": list(redirect_uris),
                "post_logout_redirect_uris": list(post_logout_redirect_uris),
            }
        )
        if self._process is not None:
            self.restart()

    def add_user(self, login: str, *, sub: str, email: str, groups=(), name: str = "") -> None:
        """A person who can sign in with `login`; read at each request, no restart needed."""
        self.users[login] = User(sub=sub, email=email, groups=list(groups), name=name)
        self._write()

    def set_groups(self, login: str, groups) -> None:
        self.users[login].groups = list(groups)
        self._write()

    def set_token_delay(self, seconds: float) -> None:
        self.token_delay_ms = int(seconds * 1000)
        self._write()

    def set_tamper(self, mode: str | None) -> None:
        """None, "expired", "wrong_key", "unsigned", "wrong_aud", "wrong_iss" or
        "stale_auth_time"."""
        self.tamper = mode
        self._write()

    def rotate_keys(self, *, keep_old: bool = False) -> None:
        """Sign with a new key from now on (a restart); the old key stays published or not."""
        self.keys = [rsa_private_jwk(), *(self.keys if keep_old else [])]
        self.restart()

    # --- process ---------------------------------------------------------------------------------
    def _write(self) -> None:
        config = {
            "issuer": self.issuer,
            "port": self.port,
            "keys": self.keys,
            "clients": self.clients,
            "users": {login: vars(user) for login, user in self.users.items()},
            "token_delay_ms": self.token_delay_ms,
            "tamper": self.tamper,
        }
        tmp = self._config.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(self._config)  # the provider never reads half a file

    def start(self, *, ready_within: float = 20.0) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("Node.js is needed for the local OpenID Connect provider")
        if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError("tests/idp/node_modules is missing: run scripts/install.sh dev")
        self._write()
        self._spawn(
            [node, str(SCRIPT), str(self._config)],
            cwd=IDP_DIR,
            ready=self.discovery,
            ready_within=ready_within,
        )

    # --- reading it ------------------------------------------------------------------------------
    def get_json(self, url: str) -> dict:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback)
            return json.load(response)

    def discovery(self) -> dict:
        return self.get_json(f"{self.issuer}/.well-known/openid-configuration")

    def jwks(self) -> dict:
        return self.get_json(self.discovery()["jwks_uri"])

    def provider_setting(self, *, key: str, client_id: str, client_secret: str, **extra) -> dict:
        """The console's OIDC_PROVIDERS entry for this provider."""
        return {
            "key": key,
            "name": extra.pop("name", key.title()),
            "issuer": self.issuer,
            "client_id": client_id,
            "client_secret": client_secret,
            "scopes": "openid email profile groups",
            "groups_claim": "groups",
            **extra,
        }

    def sign_in(self, authorize_url: str, login: str, *, redirect_uri: str) -> str:
        """Play the person at the provider over HTTP: follow its redirects from
        `authorize_url`, type `login` on its sign-in page, and return the URL it sends the
        browser back to (starting with `redirect_uri`, not fetched)."""
        browser = requests.Session()
        url = authorize_url
        for _ in range(12):
            response = browser.get(url, allow_redirects=False, timeout=10)
            if not response.is_redirect:
                form = re.search(r'<form method="post" action="([^"]+)"', response.text)
                assert form, (
                    f"no sign-in form at {url}: {response.status_code} {response.text[:300]}"
                )
                response = browser.post(
                    urljoin(url, html.unescape(form.group(1))),
                    data={"login": login},
                    allow_redirects=False,
                    timeout=10,
                )
                assert response.is_redirect, response.text[:300]
            url = urljoin(url, response.headers["location"])
            if url.startswith(redirect_uri):
                return url
        raise AssertionError(f"the provider never sent the browser back to {redirect_uri}")
