// The authorization server of the auth tests (tests/auth/provider.sh): client credentials,
// JWT access tokens (RFC 9068) for the resource named in the request (RFC 8707), each
// client's tenants in the `tenants` claim.
import { createServer } from 'node:http';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import Provider from 'oidc-provider';
import { exportJWK, exportPKCS8, generateKeyPair } from 'jose';

const args = process.argv.slice(2);
const option = (name) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
};
const port = Number(option('--port') ?? 0);
const keysFile = option('--keys');
if (!keysFile) throw new Error('--keys FILE is required');

// Signing keys: the first signs; the rest stay published (a rotation keeps the old one).
async function newKey() {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid: randomUUID(), alg: 'RS256', use: 'sig' };
  return { jwk, pem: await exportPKCS8(privateKey) };
}
let keys = existsSync(keysFile) ? JSON.parse(readFileSync(keysFile, 'utf8')) : [];
if (keys.length === 0 || args.includes('--rotate')) keys = [await newKey(), ...keys];
writeFileSync(keysFile, JSON.stringify(keys, null, 2));

// Each client: its scope and the tenants its tokens name. The secret is `<id>-secret`.
const ALL = 'memory:read memory:write memory:any-tenant';
const CLIENTS = {
  'alpha-writer': { scope: 'memory:read memory:write', tenants: ['alpha'] },
  'alpha-reader': { scope: 'memory:read', tenants: ['alpha'] },
  'beta-writer': { scope: 'memory:read memory:write', tenants: ['beta'] },
  'both-reader': { scope: 'memory:read', tenants: ['alpha', 'beta'] },
  gateway: { scope: ALL, tenants: [] },
  // The TypeScript SDK's own OAuth flow in the interop tests (tests/interop/run.sh).
  'interop-ts': { scope: 'memory:read memory:write', tenants: ['interop-ts-oauth'] },
};

const server = createServer();
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: Object.entries(CLIENTS).map(([id, c]) => ({
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: c.scope,
  })),
  scopes: ALL.split(' '),
  jwks: { keys: keys.map((k) => k.jwk) },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => ({
        scope: ALL,
        audience: indicator,
        accessTokenFormat: 'jwt',
        accessTokenTTL: 600,
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  extraTokenClaims: (ctx, token) => ({ tenants: CLIENTS[token.clientId]?.tenants ?? [] }),
});
server.on('request', provider.callback());
console.log(`listening ${server.address().port}`);
