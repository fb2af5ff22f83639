//! Keys bound to tenants, for deployments without an identity provider
//! (docs/protocol.md#keys-file). The file holds each key's SHA-256, never the key: a key is
//! 32 random bytes, so a fast hash is as strong as a slow one, and a leaked file lets no one
//! call. `mcp-memory keys add` mints a key and prints it once; the server re-reads the file
//! on SIGHUP, keeping the keys in force when the new file is unreadable.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Access;
use super::{Credential, Tenants};
use crate::memory::{Tenant, hex};

const FORMAT: &str = "mcp-memory-keys/1";
/// What every key starts with, so a leaked one is recognised by secret scanners and people.
const PREFIX: &str = "mcpm_";
const MAX_NAME_CHARS: usize = 64;

/// The file as written: human-readable, one entry a key.
#[derive(Debug, Serialize, Deserialize)]
struct File {
    format: String,
    keys: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Who holds it: what memories record as `key:NAME`, and logs name.
    pub name: String,
    /// The SHA-256 of the key, in hex.
    sha256: String,
    /// The tenants it may use; empty with `any_tenant`.
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub any_tenant: bool,
    /// False for a read-only key.
    pub write: bool,
    pub created_at: String,
}

/// The keys in force, read from `path`.
pub struct Keyring {
    path: PathBuf,
    entries: RwLock<Arc<Vec<Entry>>>,
}

impl Keyring {
    pub fn open(path: PathBuf) -> Result<Keyring, String> {
        let entries = read(&path).map_err(|e| format!("MCP_KEYS_FILE {e}"))?;
        Ok(Keyring {
            path,
            entries: RwLock::new(Arc::new(entries)),
        })
    }

    pub fn reload(&self) -> Result<usize, String> {
        let entries = read(&self.path)?;
        let count = entries.len();
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(entries);
        Ok(count)
    }

    /// The credential of `token`, if it is a key of the file. Every entry's hash is compared
    /// in constant time.
    pub fn admit(&self, token: &str) -> Option<Credential> {
        let hash = hex(&Sha256::digest(token.as_bytes()));
        let entries = Arc::clone(&self.entries.read().unwrap_or_else(|e| e.into_inner()));
        let found =
            (entries.iter()).find(|e| bool::from(e.sha256.as_bytes().ct_eq(hash.as_bytes())))?;
        Some(Credential {
            name: Some(super::name_of("key", &found.name)),
            tenants: match found.any_tenant {
                true => Tenants::Any,
                false => Tenants::Only(found.tenants.clone()),
            },
            access: Access {
                read: true,
                write: found.write,
            },
        })
    }

    pub fn describe(&self) -> String {
        let count = self.entries.read().map(|e| e.len()).unwrap_or_default();
        format!(
            "keys file {} ({count} keys bound to tenants; SIGHUP re-reads it)",
            self.path.display()
        )
    }
}

/// What `keys add` is asked for.
pub struct NewKey {
    pub name: Option<String>,
    pub tenants: Vec<String>,
    pub any_tenant: bool,
    pub read_only: bool,
}

/// Mints a key into the file at `path` (creating it), and returns the key: the only time it
/// is ever shown.
pub fn add(path: &Path, new: NewKey) -> Result<(Entry, String), String> {
    let _lock = lock(path)?;
    let mut entries = match path.exists() {
        true => read(path)?,
        false => Vec::new(),
    };
    if new.any_tenant != new.tenants.is_empty() {
        return Err("give --tenant (one or more) or --any-tenant, not both".into());
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a key: {e}"))?;
    let key = format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let sha256 = hex(&Sha256::digest(key.as_bytes()));
    let entry = Entry {
        name: new.name.unwrap_or_else(|| format!("key-{}", &sha256[..8])),
        sha256,
        tenants: new.tenants,
        any_tenant: new.any_tenant,
        write: !new.read_only,
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    check(&entry)?;
    if entries.iter().any(|e| e.name == entry.name) {
        return Err(format!(
            "a key named \"{}\" is already in {}; remove it first, or choose another --name",
            entry.name,
            path.display()
        ));
    }
    entries.push(entry.clone());
    write(path, entries)?;
    Ok((entry, key))
}

/// Removes the key named `name` from the file; a server re-reading it (SIGHUP) refuses the
/// key from then on.
pub fn remove(path: &Path, name: &str) -> Result<(), String> {
    let _lock = lock(path)?;
    let mut entries = read(path)?;
    let before = entries.len();
    entries.retain(|e| e.name != name);
    if entries.len() == before {
        return Err(format!("no key named \"{name}\" in {}", path.display()));
    }
    write(path, entries)
}

/// The keys of the file, without their hashes.
pub fn list(path: &Path) -> Result<Vec<Entry>, String> {
    read(path)
}

impl Entry {
    /// One line for `keys list` and `keys add`: name, tenants, access.
    pub fn summary(&self) -> String {
        let tenants = match self.any_tenant {
            true => "any tenant".to_owned(),
            false => self.tenants.join(", "),
        };
        let access = if self.write {
            "read and write"
        } else {
            "read only"
        };
        format!("{}\t{access}\t{tenants}\t{}", self.name, self.created_at)
    }
}

/// Held while `keys add` or `keys remove` reads, changes and writes the file, so two at once
/// cannot lose a key: an exclusive lock on `<file>.lock` beside it.
fn lock(path: &Path) -> Result<std::fs::File, String> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&name)
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(file)
}

fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{} cannot be read: {e} (make a key with `mcp-memory keys add`)",
            path.display()
        )
    })?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a keys file: {e}", path.display()))?;
    if file.format != FORMAT {
        return Err(format!(
            "{} has format \"{}\"; this release reads \"{FORMAT}\"",
            path.display(),
            file.format
        ));
    }
    let mut names = std::collections::HashSet::new();
    for entry in &file.keys {
        check(entry).map_err(|e| format!("{}: {e}", path.display()))?;
        if !names.insert(entry.name.as_str()) {
            return Err(format!(
                "{}: the name \"{}\" is used by two keys",
                path.display(),
                entry.name
            ));
        }
    }
    Ok(file.keys)
}

fn check(entry: &Entry) -> Result<(), String> {
    let name_ok = !entry.name.is_empty()
        && entry.name.chars().count() <= MAX_NAME_CHARS
        && (entry.name.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !name_ok {
        return Err(format!(
            "key name \"{}\" must be 1 to {MAX_NAME_CHARS} letters, digits, '.', '_' or '-'",
            entry.name
        ));
    }
    // Lower case, as `admit` compares it.
    let hash_ok = entry.sha256.len() == 64
        && (entry.sha256.bytes()).all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hash_ok {
        return Err(format!(
            "key \"{}\": sha256 must be 64 lower-case hex digits",
            entry.name
        ));
    }
    if entry.any_tenant && !entry.tenants.is_empty() {
        return Err(format!(
            "key \"{}\" names tenants and any_tenant; choose one",
            entry.name
        ));
    }
    if !entry.any_tenant && entry.tenants.is_empty() {
        return Err(format!(
            "key \"{}\" may use no tenant: list its tenants, or set any_tenant",
            entry.name
        ));
    }
    for tenant in &entry.tenants {
        Tenant::parse(
            &format!("key \"{}\": tenant \"{tenant}\"", entry.name),
            tenant.clone(),
        )?;
    }
    Ok(())
}

/// Writes the whole file anew beside the old one and renames it over, readable by its owner
/// only: a server re-reading it sees the old file or the new, never half of one.
fn write(path: &Path, keys: Vec<Entry>) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(failed)?;
    let text = serde_json::to_string_pretty(&File {
        format: FORMAT.into(),
        keys,
    })
    .expect("a keys file serialises");
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.write_all(b"\n").map_err(failed)?;
    file.as_file().sync_all().map_err(failed)?;
    file.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(tenants: &[&str], read_only: bool) -> NewKey {
        NewKey {
            name: None,
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
            any_tenant: tenants.is_empty(),
            read_only,
        }
    }

    #[test]
    fn a_minted_key_is_admitted_for_its_tenants_and_the_file_holds_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let (entry, key) = add(&path, new(&["alpha", "beta"], true)).unwrap();
        let (_, other) = add(&path, new(&[], false)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&key) && !text.contains(&key[PREFIX.len()..]));
        let ring = Keyring::open(path.clone()).unwrap();
        let credential = ring.admit(&key).unwrap();
        assert_eq!(credential.name, Some(format!("key:{}", entry.name)));
        assert_eq!(
            credential.tenants,
            Tenants::Only(vec!["alpha".into(), "beta".into()])
        );
        assert_eq!(
            credential.access,
            Access {
                read: true,
                write: false
            }
        );
        assert_eq!(ring.admit(&other).unwrap().tenants, Tenants::Any);
        assert!(ring.admit("mcpm_guess").is_none());
        assert!(ring.admit(&key[..key.len() - 1]).is_none());

        remove(&path, &entry.name).unwrap();
        assert!(ring.admit(&key).is_some(), "in force until re-read");
        assert_eq!(ring.reload(), Ok(1));
        assert!(ring.admit(&key).is_none());
        assert!(ring.admit(&other).is_some());
    }

    #[test]
    fn a_broken_file_is_refused_and_the_keys_in_force_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let (_, key) = add(&path, new(&["alpha"], false)).unwrap();
        let ring = Keyring::open(path.clone()).unwrap();
        std::fs::write(&path, "{\"format\": \"mcp-memory-keys/1\", \"keys\": [").unwrap();
        assert!(ring.reload().unwrap_err().contains("is not a keys file"));
        assert!(ring.admit(&key).is_some());
        let missing = Keyring::open(dir.path().join("none.json")).err().unwrap();
        assert!(
            missing.starts_with("MCP_KEYS_FILE ") && missing.contains("keys add"),
            "{missing}"
        );
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let named = |name: &str| NewKey {
            name: Some(name.into()),
            ..new(&["alpha"], false)
        };
        add(&path, named("ci")).unwrap();
        assert!(add(&path, named("ci")).unwrap_err().contains("already in"));
        assert!(add(&path, named("a b")).unwrap_err().contains("key name"));
        assert!(
            add(&path, new(&["../x"], false))
                .unwrap_err()
                .contains("tenant")
        );
        let both = NewKey {
            any_tenant: true,
            ..named("both")
        };
        assert!(add(&path, both).unwrap_err().contains("not both"));
        assert_eq!(list(&path).unwrap().len(), 1);
    }
}
