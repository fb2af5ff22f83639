//! The authorization server's signing keys (docs/protocol.md#oauth): found through its
//! metadata (RFC 8414, then OpenID Connect Discovery), fetched with timeouts, kept, and
//! fetched again when a token names a key we do not hold or the set is an hour old, at
//! most once per `MIN_INTERVAL`. Keys once fetched keep verifying while the issuer is
//! unreachable: an outage of the identity provider is not an outage of memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{AlgorithmFamily, DecodingKey};
use serde_json::Value;

use super::Refusal;

/// How long one fetch may take, all of it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The least time from the end of one fetch to the start of the next, whatever tokens
/// arrive: a flood of made-up key ids costs the issuer one request per interval.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// After this, the set is fetched again in the background on the next token (the old one
/// serving meanwhile), so a key the issuer withdrew stops verifying once that fetch lands.
const MAX_AGE: Duration = Duration::from_secs(3600);
/// The largest metadata or key set read.
const MAX_BODY_BYTES: usize = 512 * 1024;

pub struct Key {
    pub key: DecodingKey,
    pub family: AlgorithmFamily,
}

#[derive(Default)]
struct Held {
    by_id: HashMap<String, Arc<Key>>,
    /// Keys without a `kid`: used for a token without one when they are all there is.
    unnamed: Vec<Arc<Key>>,
    fetched: Option<Instant>,
}

#[derive(Default)]
struct Attempt {
    /// When the last fetch ended.
    at: Option<Instant>,
    /// Why the last fetch failed, for the 503 of a request that finds no key at all.
    error: Option<String>,
    jwks_uri: Option<String>,
}

pub struct KeyCache {
    issuer: String,
    /// Whether `OAUTH_JWKS_URI` named the key set (else it is discovered, and discovered
    /// again after it failed).
    jwks_configured: bool,
    client: reqwest::Client,
    held: RwLock<Held>,
    /// Held while fetching, so concurrent requests wait for one fetch instead of making many.
    attempt: tokio::sync::Mutex<Attempt>,
    /// Fetches ended: a request that waited while one ran takes its outcome, never starting
    /// another, so a slow issuer costs each request one fetch's time at most.
    fetches: AtomicU64,
}

impl KeyCache {
    pub fn new(issuer: String, jwks_uri: Option<String>) -> KeyCache {
        // No redirects: one could lead to a plain-http key set.
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTPS client");
        KeyCache {
            issuer,
            jwks_configured: jwks_uri.is_some(),
            client,
            held: RwLock::default(),
            attempt: tokio::sync::Mutex::new(Attempt {
                jwks_uri,
                ..Attempt::default()
            }),
            fetches: AtomicU64::new(0),
        }
    }

    /// Fetches the keys now (at start): how many there are, or why not.
    pub async fn warm(&self) -> Result<usize, String> {
        let mut attempt = self.attempt.lock().await;
        self.fetch(&mut attempt).await?;
        let held = self.read();
        Ok(held.by_id.len() + held.unnamed.len())
    }

    /// The key that verifies a token naming `kid`.
    pub async fn key(self: &Arc<Self>, kid: Option<&str>) -> Result<Arc<Key>, Refusal> {
        let (found, fresh) = {
            let held = self.read();
            let fresh = held.fetched.is_some_and(|at| at.elapsed() < MAX_AGE);
            (find(&held, kid), fresh)
        };
        match (found, fresh) {
            (Some(key), true) => return Ok(key),
            // Stale: fetched again in the background; the held set serves meanwhile.
            (Some(key), false) => {
                let cache = Arc::clone(self);
                tokio::spawn(async move {
                    if let Ok(mut attempt) = cache.attempt.try_lock()
                        && due(&attempt)
                    {
                        let _ = cache.fetch(&mut attempt).await;
                    }
                });
                return Ok(key);
            }
            (None, _) => {}
        }
        let seen = self.fetches.load(Ordering::Acquire);
        let mut attempt = self.attempt.lock().await;
        // A fetch that ended while this request waited is its answer.
        if self.fetches.load(Ordering::Acquire) == seen && due(&attempt) {
            let _ = self.fetch(&mut attempt).await;
        }
        let held = self.read();
        if let Some(key) = find(&held, kid) {
            return Ok(key);
        }
        if held.fetched.is_none() {
            // Why is in the log (`oauth_keys_fetch_failed`), not for any caller to read.
            return Err(Refusal::Unavailable(
                "the authorization server's signing keys could not be fetched; try again \
                 shortly"
                    .into(),
            ));
        }
        Err(Refusal::Invalid(match kid {
            Some(_) => "the token is signed with a key the issuer does not publish".into(),
            None => "the token names no key (kid) and the issuer publishes several".into(),
        }))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held> {
        self.held.read().unwrap_or_else(|e| e.into_inner())
    }

    /// One fetch of the key set (after the metadata, the first time); on failure the keys
    /// held stay.
    async fn fetch(&self, attempt: &mut Attempt) -> Result<(), String> {
        let outcome = self.fetch_keys(attempt).await;
        attempt.at = Some(Instant::now());
        self.fetches.fetch_add(1, Ordering::Release);
        match &outcome {
            Ok(held) => {
                *self.held.write().unwrap_or_else(|e| e.into_inner()) = Held {
                    by_id: held.by_id.clone(),
                    unnamed: held.unnamed.clone(),
                    fetched: Some(Instant::now()),
                };
                attempt.error = None;
            }
            Err(e) => {
                crate::log::error("oauth_keys_fetch_failed", e, &crate::log::Fields::default());
                attempt.error = Some(e.clone());
                // A discovered key set that failed may have moved: ask the metadata again.
                if !self.jwks_configured {
                    attempt.jwks_uri = None;
                }
            }
        }
        outcome.map(|_| ())
    }

    async fn fetch_keys(&self, attempt: &mut Attempt) -> Result<Held, String> {
        let jwks_uri = match &attempt.jwks_uri {
            Some(uri) => uri.clone(),
            None => {
                let uri = self.discover().await?;
                super::oauth::fetchable("the issuer's jwks_uri", &uri)?;
                attempt.jwks_uri = Some(uri.clone());
                uri
            }
        };
        let set: JwkSet = serde_json::from_value(self.get(&jwks_uri).await?)
            .map_err(|e| format!("{jwks_uri} is not a JWK set: {e}"))?;
        let mut held = Held::default();
        for jwk in &set.keys {
            // Only public keys of asymmetric algorithms; a symmetric (`oct`) key in the set
            // would let anyone holding it sign, so it is never used.
            let family = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa,
                AlgorithmParameters::EllipticCurve(_) => AlgorithmFamily::Ec,
                AlgorithmParameters::OctetKeyPair(_) => AlgorithmFamily::Ed,
                _ => continue,
            };
            let encrypts = matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            );
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            if encrypts {
                continue;
            }
            let key = Arc::new(Key { key, family });
            match &jwk.common.key_id {
                Some(kid) => {
                    held.by_id.insert(kid.clone(), key);
                }
                None => held.unnamed.push(key),
            }
        }
        if held.by_id.is_empty() && held.unnamed.is_empty() {
            return Err(format!(
                "{jwks_uri} holds no signing key this server can use"
            ));
        }
        Ok(held)
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's well-known place, then OpenID
    /// Connect's; the metadata must name the configured issuer (RFC 8414, section 3.3).
    async fn discover(&self) -> Result<String, String> {
        let issuer = self.issuer.trim_end_matches('/');
        let url = reqwest::Url::parse(issuer).map_err(|e| e.to_string())?;
        let path = url.path().trim_end_matches('/');
        let origin = url.origin().ascii_serialization();
        let places = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{issuer}/.well-known/openid-configuration"),
        ];
        let mut errors = Vec::new();
        for place in places {
            match self.get(&place).await {
                Ok(metadata) => {
                    let named = metadata["issuer"].as_str().map(|i| i.trim_end_matches('/'));
                    // Another issuer's metadata (a host-wide document) is passed over.
                    if named != Some(issuer) {
                        errors.push(format!(
                            "{place} names issuer {}, not OAUTH_ISSUER {issuer}",
                            metadata["issuer"]
                        ));
                        continue;
                    }
                    return (metadata["jwks_uri"].as_str())
                        .map(str::to_owned)
                        .ok_or_else(|| format!("{place} names no jwks_uri"));
                }
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }

    async fn get(&self, url: &str) -> Result<Value, String> {
        let failed = |e: reqwest::Error| format!("GET {url}: {}", cause(&e));
        let mut response = (self.client.get(url))
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(failed)?;
        if !response.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", response.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY_BYTES {
                return Err(format!("GET {url}: more than {MAX_BODY_BYTES} bytes"));
            }
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not JSON: {e}"))
    }
}

fn due(attempt: &Attempt) -> bool {
    attempt.at.is_none_or(|at| at.elapsed() >= MIN_INTERVAL)
}

fn find(held: &Held, kid: Option<&str>) -> Option<Arc<Key>> {
    match kid {
        Some(kid) => held.by_id.get(kid).cloned(),
        None => match (held.by_id.len(), held.unnamed.as_slice()) {
            (0, [only]) => Some(Arc::clone(only)),
            (1, []) => held.by_id.values().next().cloned(),
            _ => None,
        },
    }
}

/// Why a request failed, without the URL (the caller puts it first).
fn cause(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        e.to_string()
    }
}
