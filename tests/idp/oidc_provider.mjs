// A real OpenID Connect provider for the test suite (issue 33): panva's certified
// `oidc-provider`, on loopback, started by tests/idp/oidc.py with one argument, the path of a
// JSON configuration file:
//
//   {"issuer": "http://127.0.0.1:PORT", "port": PORT,
//    "keys": [private RSA JWKs; the first signs],
//    "clients": [{"client_id", "client_secret", "redirect_uris", "post_logout_redirect_uris"}],
//    "users": {"<login>": {"sub", "email", "name", "groups": [...]}},
//    "token_delay_ms": 0, "tamper": null}
//
// Keys and clients are read at start (rotating keys is a restart); users, the token delay and
// the tamper mode are read again at each request, so a test changes them by rewriting the file.
// `tamper` alters the ID token the real token endpoint issued, to prove the console refuses it:
// "expired", "wrong_key" (same kid, another key), "unsigned" (alg none), "wrong_aud", "wrong_iss",
// "stale_auth_time" (well signed, but says the person signed in an hour ago).
import { readFileSync } from 'node:fs';
import http from 'node:http';

import { SignJWT, UnsecuredJWT, decodeJwt, generateKeyPair, importJWK } from 'jose';
import Provider from 'oidc-provider';

const configPath = process.argv[2];
const readConfig = () => JSON.parse(readFileSync(configPath, 'utf8'));
const start = readConfig();

const findUser = (predicate) => Object.entries(readConfig().users || {}).find(predicate);

const provider = new Provider(start.issuer, {
  clients: start.clients.map((c) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
    ...c,
  })),
  jwks: { keys: start.keys },
  cookies: { keys: ['test-idp-cookie-key'] },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  // Every client of this provider uses PKCE (the console always sends it).
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      // Sign out without the confirmation page: the console's own button was the confirmation.
      logoutSource: async (ctx, form) => {
        ctx.body = `<!DOCTYPE html><html><body>${form}
          <button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Sign out</button>
          <script>document.getElementById('op.logoutForm').insertAdjacentHTML('beforeend','<input type="hidden" name="logout" value="yes">');document.getElementById('op.logoutForm').submit();</script>
          </body></html>`;
      },
    },
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  // First-party test clients: consent is implied.
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  findAccount: async (ctx, sub) => {
    const found = findUser(([, u]) => u.sub === sub);
    if (!found) return undefined;
    const [login, user] = found;
    return {
      accountId: sub,
      claims: async () => ({
        sub,
        email: user.email,
        email_verified: true,
        name: user.name || login,
        preferred_username: login,
        groups: user.groups || [],
      }),
    };
  },
});

// --- what the tests steer: a slow token endpoint, a tampered ID token -----------------------------
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function tampered(idToken, mode) {
  const claims = decodeJwt(idToken);
  const [signing] = start.keys;
  const now = Math.floor(Date.now() / 1000);
  const header = { alg: 'RS256', kid: signing.kid };
  if (mode === 'unsigned') return new UnsecuredJWT(claims).encode();
  if (mode === 'expired') Object.assign(claims, { iat: now - 3600, exp: now - 1800 });
  if (mode === 'wrong_aud') claims.aud = 'another-client';
  if (mode === 'wrong_iss') claims.iss = 'http://127.0.0.1:9/not-the-issuer';
  if (mode === 'stale_auth_time') claims.auth_time = now - 3600;
  const key = mode === 'wrong_key'
    ? (await generateKeyPair('RS256')).privateKey
    : await importJWK(signing, 'RS256');
  return new SignJWT(claims).setProtectedHeader(header).sign(key);
}

provider.use(async (ctx, next) => {
  const isToken = ctx.path === '/token' && ctx.method === 'POST';
  const { token_delay_ms: delay = 0, tamper = null } = isToken ? readConfig() : {};
  if (delay) await sleep(delay);
  await next();
  if (isToken && tamper && ctx.body && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: await tampered(ctx.body.id_token, tamper) };
  }
});

// --- the sign-in page (a login name, no password: this provider is for tests) --------------------
const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error = '') {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Test identity provider</title></head>
<body><h1>Test identity provider</h1>${error ? `<p role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>Login <input name="login" autocomplete="username" autofocus></label>
<button type="submit">Sign in</button></form></body></html>`;
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return Object.fromEntries(new URLSearchParams(body));
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (req.method === 'POST' && req.url.endsWith('/login')) {
    const { login } = await readForm(req);
    const found = findUser(([name]) => name === login);
    if (!found) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(loginPage(details.uid, `No user ${login} at this provider.`));
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: found[1].sub } }, {
      mergeWithLastSubmission: false,
    });
    return;
  }
  if (details.prompt.name === 'consent') {
    // loadExistingGrant covers consent; a consent prompt here is a bug of this script.
    throw new Error(`unexpected consent prompt: ${JSON.stringify(details.prompt.details)}`);
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(loginPage(details.uid));
}

const handle = provider.callback();
const server = http.createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((error) => {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(String(error && error.message));
    });
    return;
  }
  handle(req, res);
});
server.listen(start.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${start.issuer}\n`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
