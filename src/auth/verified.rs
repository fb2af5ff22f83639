//! Access tokens already verified (docs/protocol.md#oauth): a client sends the same token on
//! every request for its lifetime, and checking its signature again each time cost 5–7 % of
//! the load benchmark's throughput (BENCHMARKS.md, "Issue 34"). A token is found by its
//! SHA-256, so a token changed in any byte is a stranger and verified in full; what it was
//! found to grant is kept until its `exp` (with the leeway) or `KEEP`, whichever is first, so
//! a key the issuer withdrew stops serving its tokens within `KEEP` as well.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Credential;

/// The longest a verified token is taken without a second look.
const KEEP: Duration = Duration::from_secs(300);
/// The most tokens kept: past it, the expired ones go, and if none has, all of them.
const MOST: usize = 10_000;

struct Entry {
    credential: Credential,
    /// Unix seconds after which the token is expired (its `exp` plus the leeway).
    expires: u64,
    until: Instant,
}

#[derive(Default)]
pub struct Verified {
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Verified {
    /// What the token of `digest` grants, if it was verified and still holds.
    pub fn get(&self, digest: &[u8; 32]) -> Option<Credential> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(digest)?;
        if entry.expires < now() || entry.until <= Instant::now() {
            entries.remove(digest);
            return None;
        }
        Some(entry.credential.clone())
    }

    /// Keeps what a token found good grants, until `expires` (Unix seconds) at the latest.
    pub fn put(&self, digest: [u8; 32], credential: Credential, expires: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MOST {
            let (at, instant) = (now(), Instant::now());
            entries.retain(|_, e| e.expires >= at && e.until > instant);
            if entries.len() >= MOST {
                entries.clear();
            }
        }
        let until = Instant::now() + KEEP;
        let entry = Entry {
            credential,
            expires,
            until,
        };
        entries.insert(digest, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Access;
    use crate::auth::Tenants;

    fn someone() -> Credential {
        Credential {
            name: Some("oauth:a".into()),
            tenants: Tenants::Only(vec!["a".into()]),
            access: Access::FULL,
        }
    }

    #[test]
    fn a_token_is_kept_until_it_expires_and_no_longer() {
        let verified = Verified::default();
        verified.put([1; 32], someone(), now() + 60);
        verified.put([2; 32], someone(), now() - 1);
        assert_eq!(verified.get(&[1; 32]), Some(someone()));
        assert_eq!(verified.get(&[2; 32]), None, "expired");
        assert_eq!(verified.get(&[3; 32]), None, "never verified");
    }

    #[test]
    fn the_number_kept_is_bounded() {
        let verified = Verified::default();
        for n in 0..(MOST + 5) {
            let mut digest = [0; 32];
            digest[..8].copy_from_slice(&(n as u64).to_le_bytes());
            verified.put(digest, someone(), now() + 60);
        }
        assert!(verified.entries.lock().unwrap().len() <= MOST);
    }
}
