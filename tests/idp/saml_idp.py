"""The local SAML 2.0 identity provider the suite signs in through: pysaml2's own IdP
(saml2.server.Server) under wsgiref, run as its own process on a free loopback port
(`python -m tests.idp.saml_idp CONFIG.json`). Python, not npm `saml-idp`: pysaml2 is already
installed for the console, so nothing more is fetched, and its Server signs assertions with
the same xmlsec1 the console checks them with — while being a different code path (the IdP
side) from the one under test.

Its signing key and certificate are made at fixture time in a temporary directory (nothing
committed), with a second "rogue" pair to sign with a key it does not publish. A test
configures its users (subject, e-mail, groups) and a tamper mode, read at each request: None,
"unsigned", "wrong_key", "wrong_audience", "wrong_recipient", "expired", or "stale_login" (a
good assertion saying the person last signed in an hour ago: ForceAuthn not honoured).
"""

from __future__ import annotations

import datetime
import html
import json
import re
import shutil
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch
from urllib.parse import parse_qs, urljoin

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.idp.process import LoopbackProcess

TAMPERS = ("unsigned", "wrong_key", "wrong_audience", "wrong_recipient", "expired", "stale_login")


def key_and_certificate(directory: Path, stem: str) -> tuple[str, str]:
    """A new RSA key and its self-signed certificate, as PEM files in `directory`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test saml idp {stem}")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(key_path), str(cert_path)


class LocalSamlIdP(LoopbackProcess):
    """One IdP process, listening on 127.0.0.1. `base` is http://<host>:<port> (host
    "localhost" for a browser test: the same site as the live server, so that its answer, a
    POST, comes with the console's SameSite=Lax cookies as over plain HTTP it must); its
    metadata is at `metadata_url`."""

    label = "the SAML IdP"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__("test-saml-idp-")
        self.base = f"http://{host}:{self.port}"
        self.metadata_url = f"{self.base}/metadata"
        self.key, self.cert = key_and_certificate(self._dir, "signing")
        self.rogue_key, self.rogue_cert = key_and_certificate(self._dir, "rogue")
        self.users: dict[str, dict] = {}
        self.tamper: str | None = None
        self.metadata_delay = 0.0
        self.sps: list[list[str]] = []
        self._config = self._dir / "config.json"

    # --- configuration -------------------------------------------------------------------------------
    def add_user(self, login: str, *, subject: str, email: str, groups=(), name: str = "") -> None:
        self.users[login] = {
            "subject": subject,
            "email": email,
            "groups": list(groups),
            "name": name,
            "username": login,
        }
        self._write()

    def set_groups(self, login: str, groups) -> None:
        self.users[login]["groups"] = list(groups)
        self._write()

    def set_tamper(self, mode: str | None) -> None:
        assert mode is None or mode in TAMPERS, mode
        self.tamper = mode
        self._write()

    def register_sp(self, *, entity_id: str, acs: str, sls: str) -> None:
        """What the IdP's administrator enters for the console (its single logout address is
        only known this way)."""
        self.sps.append([entity_id, acs, sls])
        self._write()

    def logouts_forget(self) -> None:
        (self._dir / "logouts.txt").unlink(missing_ok=True)

    def logouts(self) -> list[str]:
        """The NameIDs single logout was asked for, in order."""
        path = self._dir / "logouts.txt"
        return path.read_text().split() if path.exists() else []

    def set_metadata_delay(self, seconds: float) -> None:
        self.metadata_delay = seconds
        self._write()

    def _write(self) -> None:
        config = {
            "base": self.base,
            "port": self.port,
            "key": self.key,
            "cert": self.cert,
            "rogue_key": self.rogue_key,
            "rogue_cert": self.rogue_cert,
            "users": self.users,
            "tamper": self.tamper,
            "metadata_delay": self.metadata_delay,
            "sps": self.sps,
            "logouts": str(self._dir / "logouts.txt"),
        }
        tmp = self._config.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(self._config)

    # --- process -------------------------------------------------------------------------------------
    def start(self, *, ready_within: float = 20.0) -> None:
        self._write()
        self._spawn(
            [sys.executable, "-m", "tests.idp.saml_idp", str(self._config)],
            cwd=Path(__file__).resolve().parents[2],
            ready=lambda: urllib.request.urlopen(self.metadata_url, timeout=2).close(),  # noqa: S310
            ready_within=ready_within,
        )

    # --- using it ------------------------------------------------------------------------------------
    def provider_setting(self, *, key: str, **extra) -> dict:
        """The console's SAML_PROVIDERS entry for this IdP."""
        return {
            "key": key,
            "name": extra.pop("name", key.title()),
            "metadata_url": self.metadata_url,
            "groups_attribute": "groups",
            "email_attribute": "email",
            "username_attribute": "username",
            "name_attribute": "name",
            **extra,
        }

    def sign_in(self, start_location: str, login: str) -> tuple[str, dict]:
        """Play the person at the IdP over HTTP: open the AuthnRequest's URL, type `login`,
        and return the auto-posting form the IdP answers with: (action, fields)."""
        browser = requests.Session()
        page = browser.get(start_location, timeout=10)
        assert page.status_code == 200, page.text[:300]
        form = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert form, page.text[:300]
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
        fields = {k: html.unescape(v) for k, v in fields.items()}
        answer = browser.post(
            urljoin(start_location, form.group(1)), data={**fields, "login": login}, timeout=10
        )
        assert answer.status_code == 200, answer.text[:500]
        action = re.search(r'<form method="post" action="([^"]+)"', answer.text)
        assert action, answer.text[:300]
        posted = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', answer.text))
        return html.unescape(action.group(1)), {k: html.unescape(v) for k, v in posted.items()}


# --- the IdP process ---------------------------------------------------------------------------------
def _sp_metadata(entity_id: str, acs: str, sls: str = "") -> str:
    """What an IdP is told about a service provider when it is registered: its entity id and
    ACS URL (pysaml2's IdP looks its SPs up in metadata)."""
    from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
    from saml2.config import SPConfig
    from saml2.metadata import entity_descriptor

    sp = SPConfig()
    sp.load(
        {
            "entityid": entity_id,
            "service": {
                "sp": {
                    "endpoints": {
                        "assertion_consumer_service": [(acs, BINDING_HTTP_POST)],
                        **(
                            {"single_logout_service": [(sls, BINDING_HTTP_REDIRECT)]} if sls else {}
                        ),
                    }
                }
            },
        }
    )
    return str(entity_descriptor(sp))


def _server(config: dict, *, rogue: bool = False, sps=()):
    from saml2 import BINDING_HTTP_REDIRECT
    from saml2.config import IdPConfig
    from saml2.saml import NAMEID_FORMAT_PERSISTENT
    from saml2.server import Server

    idp = IdPConfig()
    idp.load(
        {
            "entityid": f"{config['base']}/metadata",
            "xmlsec_binary": shutil.which("xmlsec1") or "/usr/bin/xmlsec1",
            "key_file": config["rogue_key" if rogue else "key"],
            "cert_file": config["rogue_cert" if rogue else "cert"],
            "service": {
                "idp": {
                    "name": "Test SAML IdP",
                    "endpoints": {
                        "single_sign_on_service": [
                            (f"{config['base']}/sso", BINDING_HTTP_REDIRECT)
                        ],
                        "single_logout_service": [(f"{config['base']}/slo", BINDING_HTTP_REDIRECT)],
                    },
                    "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                    "policy": {
                        "default": {
                            "lifetime": {"minutes": 5},
                            "attribute_restrictions": None,
                            "name_form": "urn:oasis:names:tc:SAML:2.0:attrname-format:basic",
                        }
                    },
                }
            },
            "metadata": {"inline": [_sp_metadata(*sp) for sp in sps]} if sps else {},
        }
    )
    return Server(config=idp)


LOGIN_PAGE = """<!doctype html><html><head><title>Test SAML IdP</title></head><body>
<h1>Test SAML IdP</h1><p>{authn}</p>
<form method="post" action="/login">
<input type="hidden" name="SAMLRequest" value="{request}">
<input type="hidden" name="RelayState" value="{relay}">
<label for="login">Login</label> <input id="login" name="login" autofocus>
<button type="submit">Sign in</button>
</form></body></html>"""

POST_PAGE = """<!doctype html><html><head><title>Signing you in</title></head>
<body onload="document.forms[0].submit()">
<form method="post" action="{action}">
<input type="hidden" name="SAMLResponse" value="{response}">
<input type="hidden" name="RelayState" value="{relay}">
<noscript><button type="submit">Continue</button></noscript>
</form></body></html>"""


def _answer(config: dict, form: dict) -> tuple[int, str]:
    import base64

    from saml2 import BINDING_HTTP_REDIRECT
    from saml2.saml import NAMEID_FORMAT_PERSISTENT, NameID

    tamper = config.get("tamper")
    user = config["users"].get(form.get("login", ""))
    if user is None:
        return 403, "<p>No such user at the test IdP.</p>"
    request = _server(config).parse_authn_request(form["SAMLRequest"], BINDING_HTTP_REDIRECT)
    request = request.message
    acs, sp = request.assertion_consumer_service_url, request.issuer.text
    audience = "https://other-app.example/sp" if tamper == "wrong_audience" else sp
    signer = _server(config, rogue=tamper == "wrong_key", sps=[(sp, acs), (audience, acs)])
    identity = {
        "email": [user["email"]],
        "username": [user["username"]],
        "name": [user["name"] or user["username"]],
        "groups": list(user["groups"]),
    }
    with _assertion_clock(hours_back=1 if tamper == "expired" else 0):
        response = signer.create_authn_response(
            identity,
            in_response_to=request.id,
            destination="https://elsewhere.example/acs/" if tamper == "wrong_recipient" else acs,
            sp_entity_id=audience,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=user["subject"]),
            authn={
                "class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:Password",
                **({"authn_instant": int(time.time()) - 3600} if tamper == "stale_login" else {}),
            },
            sign_assertion=tamper != "unsigned",
            sign_response=False,
        )
    encoded = base64.b64encode(str(response).encode()).decode()
    page = POST_PAGE.format(
        action=html.escape(acs), response=encoded, relay=html.escape(form.get("RelayState", ""))
    )
    return 200, page


def _logout(config: dict, query: dict) -> list[tuple[str, str]]:
    """Single logout asked by a registered SP: the NameID noted, a LogoutResponse sent back
    to the SP's single logout service (HTTP-Redirect)."""
    from saml2 import BINDING_HTTP_REDIRECT

    server = _server(config, sps=config.get("sps") or ())
    request = server.parse_logout_request(query["SAMLRequest"], BINDING_HTTP_REDIRECT).message
    with open(config["logouts"], "a") as logouts:
        logouts.write(f"{request.name_id.text}\n")
    response = server.create_logout_response(request, [BINDING_HTTP_REDIRECT])
    destination = server.response_args(request, [BINDING_HTTP_REDIRECT])["destination"]
    info = server.apply_binding(
        BINDING_HTTP_REDIRECT,
        str(response),
        destination,
        query.get("RelayState", ""),
        response=True,
    )
    return [("Location", dict(info["headers"])["Location"])]


@contextmanager
def _assertion_clock(*, hours_back: int):
    """The assertion's times (IssueInstant, NotBefore, NotOnOrAfter) as if it had been issued
    `hours_back` hours ago: a captured old assertion, however well signed."""
    if not hours_back:
        yield
        return
    import saml2.assertion
    from saml2.time_util import TIME_FORMAT

    shift = datetime.timedelta(hours=hours_back)

    def instant(format=TIME_FORMAT, time_stamp=0):
        return (datetime.datetime.now(datetime.UTC) - shift).strftime(format)

    def in_a_while(format=TIME_FORMAT, **delta):
        moment = datetime.datetime.now(datetime.UTC) - shift + datetime.timedelta(**delta)
        return moment.strftime(format)

    with (
        patch.object(saml2.assertion, "instant", instant),
        patch.object(saml2.assertion, "in_a_while", in_a_while),
    ):
        yield


def _app(config_path: str):
    def app(environ, start_response):
        config = json.loads(Path(config_path).read_text())
        path = environ.get("PATH_INFO", "")
        status, body, kind, headers = 404, "not found", "text/plain", []
        try:
            if path == "/metadata":
                from saml2.metadata import entity_descriptor

                time.sleep(float(config.get("metadata_delay") or 0))
                status, kind = 200, "application/samlmetadata+xml"
                body = str(entity_descriptor(_server(config).config))
            elif path == "/sso":
                query = parse_qs(environ.get("QUERY_STRING", ""))
                force = "ForceAuthn" in _decoded_request(query.get("SAMLRequest", [""])[0])
                status, kind = 200, "text/html"
                body = LOGIN_PAGE.format(
                    request=html.escape(query.get("SAMLRequest", [""])[0]),
                    relay=html.escape(query.get("RelayState", [""])[0]),
                    authn="Confirm who you are (forced re-authentication)." if force else "",
                )
            elif path == "/slo":
                query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
                status, kind, body, headers = 303, "text/plain", "", _logout(config, query)
            elif path == "/login" and environ["REQUEST_METHOD"] == "POST":
                size = int(environ.get("CONTENT_LENGTH") or 0)
                raw = environ["wsgi.input"].read(size).decode()
                form = {k: v[0] for k, v in parse_qs(raw).items()}
                kind = "text/html"
                status, body = _answer(config, form)
        except Exception as error:  # noqa: BLE001 - the test reads stderr
            import traceback

            traceback.print_exc()
            status, body = 500, f"IdP error: {error!r}"
        reason = {200: "OK", 303: "See Other", 403: "Forbidden", 404: "Not Found"}
        reason[500] = "Internal Server Error"
        start_response(f"{status} {reason[status]}", [("Content-Type", kind), *headers])
        return [body.encode()]

    return app


def _decoded_request(encoded: str) -> str:
    import base64
    import zlib

    try:
        return zlib.decompress(base64.b64decode(encoded), -15).decode()
    except (ValueError, zlib.error):
        return ""


def main(config_path: str) -> None:
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    class Threading(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    config = json.loads(Path(config_path).read_text())
    server = make_server(
        "127.0.0.1", config["port"], _app(config_path), server_class=Threading, handler_class=Quiet
    )
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
