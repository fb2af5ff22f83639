//! The OAuth 2.1 resource server of the MCP authorization chapter
//! (docs/protocol.md#oauth): access tokens are JWTs verified here, with the issuer's keys
//! (`jwks`), for this server's resource (RFC 8707 `aud`), by an asymmetric algorithm only.
//! What a token may do comes from its scopes; which tenants, from a configurable claim.

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Value, json};

use sha2::{Digest, Sha256};

use super::Access;
use super::jwks::KeyCache;
use super::verified::Verified;
use super::{Credential, Refusal, Tenants, Variables};

/// How far a token's `exp` and `nbf` may be off this machine's clock.
const LEEWAY_SECONDS: u64 = 60;
/// The algorithms a token may be signed with: public-key signatures only. `none` and the
/// HMAC family are refused, so a public key can never be used as a shared secret.
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

pub(super) struct Settings {
    issuer: String,
    resource: String,
    audience: String,
    /// The tenant claim: a claim's name (Auth0's namespaced `https://…/tenants` too), or a
    /// dotted path into objects.
    tenant_claim: String,
    read_scope: String,
    write_scope: String,
    any_tenant_scope: String,
    jwks_uri: Option<String>,
}

impl Settings {
    pub(super) fn resolve(v: &Variables) -> Result<Option<Settings>, String> {
        let (issuer, resource) = match (&v.oauth_issuer, &v.oauth_resource) {
            // A setting of OAuth without the server it belongs to would start an open server.
            (None, None) => {
                let stray = [
                    ("OAUTH_AUDIENCE", &v.oauth_audience),
                    ("OAUTH_JWKS_URI", &v.oauth_jwks_uri),
                ];
                if let Some((name, _)) = stray.iter().find(|(_, value)| value.is_some()) {
                    return Err(format!(
                        "{name} is set without OAUTH_ISSUER and OAUTH_RESOURCE, which turn OAuth on"
                    ));
                }
                return Ok(None);
            }
            (Some(issuer), Some(resource)) => (issuer, resource),
            (Some(_), None) => {
                return Err(
                    "OAUTH_RESOURCE is required with OAUTH_ISSUER: this server's URI, \
                            as clients reach it (e.g. https://memory.example.com/mcp)"
                        .into(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "OAUTH_ISSUER is required with OAUTH_RESOURCE: the issuer URL of \
                            the authorization server"
                        .into(),
                );
            }
        };
        fetchable("OAUTH_ISSUER", issuer)?;
        if let Some(uri) = &v.oauth_jwks_uri {
            fetchable("OAUTH_JWKS_URI", uri)?;
        }
        let url = reqwest::Url::parse(resource).map_err(|e| {
            format!("OAUTH_RESOURCE must be an absolute URI, got \"{resource}\": {e}")
        })?;
        if !matches!(url.scheme(), "https" | "http") || url.fragment().is_some() {
            return Err(format!(
                "OAUTH_RESOURCE must be an http(s) URI without a fragment, got \"{resource}\""
            ));
        }
        let tenant_claim = v.oauth_tenant_claim.clone();
        if tenant_claim.starts_with('.') || tenant_claim.ends_with('.') {
            return Err(format!(
                "OAUTH_TENANT_CLAIM must be a claim name or a dotted path, got \"{}\"",
                v.oauth_tenant_claim
            ));
        }
        for (name, scope) in [
            ("OAUTH_READ_SCOPE", &v.oauth_read_scope),
            ("OAUTH_WRITE_SCOPE", &v.oauth_write_scope),
            ("OAUTH_ANY_TENANT_SCOPE", &v.oauth_any_tenant_scope),
        ] {
            // RFC 6749's scope-token: printable ASCII but space, '"' and '\', so that it can
            // stand in a challenge's quoted scope.
            let token = !scope.is_empty()
                && (scope.bytes()).all(|b| matches!(b, 0x21 | 0x23..=0x5b | 0x5d..=0x7e));
            if !token {
                return Err(format!(
                    "{name} must be one scope, printable ASCII without spaces, quotes or \
                     backslashes, got \"{scope}\""
                ));
            }
        }
        Ok(Some(Settings {
            issuer: issuer.clone(),
            resource: resource.clone(),
            audience: v.oauth_audience.clone().unwrap_or_else(|| resource.clone()),
            tenant_claim,
            read_scope: v.oauth_read_scope.clone(),
            write_scope: v.oauth_write_scope.clone(),
            any_tenant_scope: v.oauth_any_tenant_scope.clone(),
            jwks_uri: v.oauth_jwks_uri.clone(),
        }))
    }
}

/// An issuer's URL: https, or http to this machine only (a test's, a sidecar's).
pub(super) fn fetchable(name: &str, raw: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(raw)
        .map_err(|e| format!("{name} must be an absolute URL, got \"{raw}\": {e}"))?;
    let loopback = match url.host_str() {
        Some("localhost") => true,
        Some(host) => (host.trim_matches(['[', ']']).parse::<std::net::IpAddr>())
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    };
    let ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
    if !ok || url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{name} must be an https URL (http only to this machine) without a query, got \"{raw}\""
        ));
    }
    Ok(())
}

pub struct ResourceServer {
    settings: Settings,
    keys: std::sync::Arc<KeyCache>,
    verified: Verified,
}

/// Whether `token` has a JWT's three parts; anything else is not tried as one.
pub(super) fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

impl ResourceServer {
    pub(super) fn new(settings: Settings) -> ResourceServer {
        let keys = KeyCache::new(settings.issuer.clone(), settings.jwks_uri.clone()).into();
        ResourceServer {
            settings,
            keys,
            verified: Verified::default(),
        }
    }

    pub(super) async fn warm(&self) -> Result<usize, String> {
        self.keys.warm().await
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "OAuth access tokens of {} for {} (tenants from claim \"{}\")",
            self.settings.issuer, self.settings.resource, self.settings.tenant_claim
        )
    }

    /// Where RFC 9728's metadata is for this resource: the well-known path inserted between
    /// the host and the resource's path.
    pub fn metadata_url(&self) -> String {
        let url = reqwest::Url::parse(&self.settings.resource).expect("checked at start");
        let path = url.path().trim_end_matches('/');
        format!(
            "{}/.well-known/oauth-protected-resource{path}",
            url.origin().ascii_serialization()
        )
    }

    /// The scope a missing permission is asked for by.
    pub fn scope(&self, write: bool) -> &str {
        match write {
            true => &self.settings.write_scope,
            false => &self.settings.read_scope,
        }
    }

    pub(super) fn metadata(&self) -> Value {
        let s = &self.settings;
        json!({
            "resource": s.resource,
            "authorization_servers": [s.issuer],
            "scopes_supported": [s.read_scope, s.write_scope, s.any_tenant_scope],
            "bearer_methods_supported": ["header"],
            "resource_name": crate::SERVER_NAME,
        })
    }

    pub(super) async fn admit(&self, token: &str) -> Result<Credential, Refusal> {
        let digest: [u8; 32] = Sha256::digest(token).into();
        if let Some(credential) = self.verified.get(&digest) {
            return Ok(credential);
        }
        let invalid = |why: &str| Refusal::Invalid(why.to_owned());
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| invalid("the token's header cannot be read, or its algorithm is not a public-key algorithm (RS*, PS*, ES*, EdDSA)"))?;
        // An ID token is for the client, not for this server (RFC 9068, section 4): one that
        // names its type as anything but an access token's or a plain JWT's is refused here,
        // one that does not, by its claims below.
        let typ = header.typ.as_deref().map(str::to_ascii_lowercase);
        if typ.is_some_and(|t| !matches!(t.as_str(), "at+jwt" | "application/at+jwt" | "jwt")) {
            return Err(invalid("the token is not an access token (typ)"));
        }
        if !ALGORITHMS.contains(&header.alg) {
            return Err(invalid(
                "the token must be signed with a public-key algorithm (RS*, PS*, ES*, EdDSA)",
            ));
        }
        let key = self.keys.key(header.kid.as_deref()).await?;
        if key.family != header.alg.family() {
            return Err(invalid("the token's algorithm does not match its key"));
        }
        let s = &self.settings;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&s.issuer]);
        validation.set_audience(&[&s.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<Value>(token, &key.key, &validation)
            .map_err(|e| Refusal::Invalid(why(e.kind(), s)))?
            .claims;
        // jsonwebtoken takes a list of issuers that holds ours; a token has one.
        if claims["iss"].as_str() != Some(s.issuer.as_str()) {
            return Err(invalid(&format!("the token is not from {}", s.issuer)));
        }
        if ["nonce", "at_hash", "c_hash"]
            .iter()
            .any(|c| claims.get(*c).is_some())
        {
            return Err(invalid("the token is an ID token, not an access token"));
        }
        let credential = (self.credential(&claims))
            .ok_or_else(|| invalid("the token has no sub or client_id claim"))?;
        if let Some(exp) = claims["exp"].as_u64() {
            (self.verified).put(
                digest,
                credential.clone(),
                exp.saturating_add(LEEWAY_SECONDS),
            );
        }
        Ok(credential)
    }

    /// What the claims grant, or None without a subject to name the caller by.
    fn credential(&self, claims: &Value) -> Option<Credential> {
        let s = &self.settings;
        let scopes = scopes(claims);
        let has = |scope: &str| scopes.iter().any(|s| s == scope);
        let tenants = match has(&s.any_tenant_scope) {
            true => Tenants::Any,
            false => Tenants::Only(strings(at_path(claims, &s.tenant_claim))),
        };
        let who = (claims["sub"].as_str())
            .or(claims["client_id"].as_str())
            .filter(|w| !w.is_empty())?;
        Some(Credential {
            name: Some(super::name_of("oauth", who)),
            tenants,
            access: Access {
                read: has(&s.read_scope),
                write: has(&s.write_scope),
            },
        })
    }
}

/// A refusal the caller can act on, naming what did not hold.
fn why(kind: &jsonwebtoken::errors::ErrorKind, s: &Settings) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => "the token has expired".into(),
        K::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        K::InvalidAudience => format!(
            "the token is not for this resource (aud must be {})",
            s.audience
        ),
        K::InvalidIssuer => format!("the token is not from {}", s.issuer),
        K::InvalidSignature => "the token's signature does not verify".into(),
        K::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        K::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        _ => "the token cannot be read".into(),
    }
}

/// The granted scopes: `scope` (space-separated, RFC 9068), `scp` (a string or a list:
/// Entra ID's delegated permissions, Okta) and `roles` (Entra ID's application permissions).
fn scopes(claims: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for name in ["scope", "scp", "roles"] {
        match &claims[name] {
            Value::String(s) => found.extend(s.split_whitespace().map(str::to_owned)),
            list @ Value::Array(_) => found.extend(strings(Some(list))),
            _ => {}
        }
    }
    found
}

/// The claim named `name`, or else the one its dots lead to through objects.
fn at_path<'a>(claims: &'a Value, name: &str) -> Option<&'a Value> {
    (claims.get(name)).or_else(|| {
        name.split('.')
            .try_fold(claims, |value, part| value.get(part))
    })
}

/// A claim's value as a list of strings: one string, or the strings of a list.
fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct Only {
        #[command(flatten)]
        auth: Variables,
    }

    fn settings(vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        let only: Only = crate::variables::read(Vec::new(), |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
        .map_err(|e| crate::variables::refusal(&e))?;
        Settings::resolve(&only.auth)
    }

    fn server(vars: &[(&str, &str)]) -> ResourceServer {
        let mut all = vec![
            ("OAUTH_ISSUER", "https://id.example.com/realms/a"),
            ("OAUTH_RESOURCE", "https://memory.example.com/mcp"),
        ];
        all.extend_from_slice(vars);
        ResourceServer::new(settings(&all).unwrap().unwrap())
    }

    #[test]
    fn settings_are_checked_and_refusals_name_the_variable() {
        assert!(settings(&[]).unwrap().is_none());
        let refused = |vars: &[(&str, &str)], needle: &str| {
            let e = settings(vars).err().unwrap_or_default();
            assert!(e.contains(needle), "{vars:?}: {e}");
        };
        refused(
            &[("OAUTH_ISSUER", "https://id.example.com")],
            "OAUTH_RESOURCE is required",
        );
        refused(
            &[("OAUTH_RESOURCE", "https://m.example.com/mcp")],
            "OAUTH_ISSUER is required",
        );
        let with = |issuer: &'static str| {
            [
                ("OAUTH_ISSUER", issuer),
                ("OAUTH_RESOURCE", "https://m.example.com/mcp"),
            ]
        };
        refused(
            &with("http://id.example.com"),
            "OAUTH_ISSUER must be an https URL",
        );
        refused(
            &with("id.example.com"),
            "OAUTH_ISSUER must be an absolute URL",
        );
        assert!(settings(&with("http://127.0.0.1:9000")).unwrap().is_some());
        assert!(
            settings(&with("http://localhost:9000/oidc"))
                .unwrap()
                .is_some()
        );
        refused(
            &[
                ("OAUTH_ISSUER", "https://id.example.com"),
                ("OAUTH_RESOURCE", "mcp"),
            ],
            "OAUTH_RESOURCE must be an absolute URI",
        );
        refused(
            &[
                ("OAUTH_ISSUER", "https://id.example.com"),
                ("OAUTH_RESOURCE", "https://m.example.com/mcp"),
                ("OAUTH_WRITE_SCOPE", "a b"),
            ],
            "OAUTH_WRITE_SCOPE must be one scope",
        );
        refused(
            &[("OAUTH_AUDIENCE", "api://memory")],
            "OAUTH_AUDIENCE is set without",
        );
        refused(
            &[
                ("OAUTH_ISSUER", "https://id.example.com"),
                ("OAUTH_RESOURCE", "https://m.example.com/mcp"),
                ("OAUTH_READ_SCOPE", "read\""),
            ],
            "OAUTH_READ_SCOPE must be one scope",
        );
    }

    #[test]
    fn metadata_is_served_where_rfc_9728_puts_it() {
        let server = server(&[]);
        assert_eq!(
            server.metadata_url(),
            "https://memory.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let metadata = server.metadata();
        assert_eq!(metadata["resource"], "https://memory.example.com/mcp");
        assert_eq!(
            metadata["authorization_servers"],
            json!(["https://id.example.com/realms/a"])
        );
        assert_eq!(
            metadata["scopes_supported"],
            json!(["memory:read", "memory:write", "memory:any-tenant"])
        );
    }

    #[test]
    fn tenants_and_access_come_from_the_claims() {
        let server = server(&[("OAUTH_TENANT_CLAIM", "ext.projects")]);
        let credential = server
            .credential(&json!({
                "sub": "alice", "scope": "openid memory:read",
                "ext": {"projects": ["a", "b", 7]}
            }))
            .unwrap();
        assert_eq!(credential.name.as_deref(), Some("oauth:alice"));
        assert_eq!(
            credential.tenants,
            Tenants::Only(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            credential.access,
            Access {
                read: true,
                write: false
            }
        );
        let gateway = server.credential(&json!({
            "client_id": "gw", "scp": ["memory:write", "memory:any-tenant"], "ext": {"projects": "a"}
        }))
        .unwrap();
        assert_eq!(gateway.name.as_deref(), Some("oauth:gw"));
        assert_eq!(gateway.tenants, Tenants::Any);
        assert_eq!(
            gateway.access,
            Access {
                read: false,
                write: true
            }
        );
        let auth0 = ResourceServer::new(
            settings(&[
                ("OAUTH_ISSUER", "https://example.auth0.com/"),
                ("OAUTH_RESOURCE", "https://memory.example.com/mcp"),
                ("OAUTH_TENANT_CLAIM", "https://memory.example.com/tenants"),
            ])
            .unwrap()
            .unwrap(),
        );
        let namespaced = auth0
            .credential(&json!({"sub": "s", "https://memory.example.com/tenants": ["a"]}))
            .unwrap();
        assert_eq!(namespaced.tenants, Tenants::Only(vec!["a".into()]));
        let entra = server.credential(&json!({"sub": "x", "roles": ["memory:read"]}));
        assert_eq!(entra.as_ref().unwrap().tenants, Tenants::Only(vec![]));
        assert!(entra.unwrap().access.read);
        // Nobody to name: refused (RFC 9068 requires `sub`).
        assert_eq!(
            server.credential(&json!({"scope": "memory:read", "sub": ""})),
            None
        );
    }
}
