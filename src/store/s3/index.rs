//! The recency index in the state bucket (docs/stores.md#recency-index): one empty object per memory
//! whose key sorts newest first under the tenant's prefix and carries everything listing,
//! counting and the expiry sweep need (id, type, for a conversation's note a digest of the
//! conversation, and for a memory that expires its expiry), so none has to read a memory.

use sha2::{Digest, Sha256};

use crate::memory::{Conversation, Memory, Scope, Tenant};

/// Crockford base-32, the ULID alphabet.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const MAX_TIME: u64 = (1 << 48) - 1;
const TIME_CHARS: usize = 10;

/// The milliseconds a ULID was minted at; `None` unless it has the 26 characters of a
/// ULID and a valid 48-bit time part.
pub fn ulid_time(id: &str) -> Option<u64> {
    if id.len() != 26 {
        return None;
    }
    let mut ms: u64 = 0;
    for c in id.bytes().take(TIME_CHARS) {
        let digit = ALPHABET.iter().position(|a| *a == c)?;
        ms = ms * 32 + digit as u64;
    }
    (ms <= MAX_TIME).then_some(ms)
}

/// `ms` in ten ULID characters, so that text order is time order.
pub fn encode_time(ms: u64) -> String {
    let mut out = [0u8; TIME_CHARS];
    let mut rest = ms;
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(rest % 32) as usize];
        rest /= 32;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sorts the newest first in S3's ascending listing.
pub fn inverted_time(ms: u64) -> Option<String> {
    (ms <= MAX_TIME).then(|| encode_time(MAX_TIME - ms))
}

/// A stable, non-secret stand-in for a conversation id: the first 16 hex characters of its
/// SHA-256, so the id itself never appears in a key.
pub fn digest(conversation: &Conversation) -> String {
    let hash = Sha256::digest(conversation.as_str().as_bytes());
    crate::memory::hex(&hash[..8])
}

/// Where every tenant's keys are, for the expiry sweep.
pub const ALL: &str = "index/";

pub fn prefix(tenant: &Tenant) -> String {
    format!("{ALL}{}/", tenant.as_str())
}

/// The index key of a memory; `None` for an id that is not a ULID (nothing to sort by).
/// `<inverted time>#<id>#<type>`, then `#<digest>` for a conversation's note, then for a
/// memory that expires `#e<ms>` (after an empty digest for a project memory). Releases
/// before expiry read only up to four parts, so they skip a memory that expires rather
/// than show it past its time.
pub fn key(tenant: &Tenant, memory: &Memory) -> Option<String> {
    let id = &memory.id;
    let inverted = inverted_time(ulid_time(id)?)?;
    let mut key = format!("{}{inverted}#{id}#{}", prefix(tenant), memory.memory_type);
    if memory.scope == Scope::Conversation {
        key.push('#');
        key.push_str(&digest(memory.conversation.as_ref()?));
    }
    if let Some(at) = memory.expires_at {
        if memory.scope == Scope::Project {
            key.push('#');
        }
        key.push_str(&format!("#e{at}"));
    }
    Some(key)
}

/// Where a listing goes on after memory `id`: past every key of that memory, whatever its
/// type and audience (they follow the id, and `~` sorts after all of their characters).
pub fn after(tenant: &Tenant, id: &str) -> String {
    let inverted = ulid_time(id).and_then(inverted_time).unwrap_or_default();
    format!("{}{inverted}#{id}#~", prefix(tenant))
}

/// What an index key says about its memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key itself.
    pub key: String,
    pub tenant: String,
    pub id: String,
    /// As written; a type this version does not know still counts towards totals.
    pub memory_type: String,
    pub digest: Option<String>,
    /// Epoch milliseconds; `None`: never.
    pub expires_at: Option<i64>,
}

impl Entry {
    /// `None` for a key that is not an index entry.
    pub fn parse(key: &str) -> Option<Entry> {
        let (tenant, name) = key.strip_prefix(ALL)?.split_once('/')?;
        let parts: Vec<&str> = name.split('#').collect();
        if !(3..=5).contains(&parts.len()) || parts[1].is_empty() || parts[2].is_empty() {
            return None;
        }
        let expires_at = match parts.get(4) {
            None => None,
            Some(part) => Some(part.strip_prefix('e')?.parse().ok()?),
        };
        Some(Entry {
            key: key.to_owned(),
            tenant: tenant.to_owned(),
            id: parts[1].to_owned(),
            memory_type: parts[2].to_owned(),
            digest: parts
                .get(3)
                .filter(|d| !d.is_empty())
                .map(|d| d.to_string()),
            expires_at,
        })
    }

    /// Key-level visibility: a conversation's note shows only to that conversation. The
    /// memory itself stays authoritative wherever it is read.
    pub fn visible_to(&self, conversation_digest: Option<&str>) -> bool {
        match &self.digest {
            None => true,
            Some(d) => conversation_digest == Some(d.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryType;

    fn tenant() -> Tenant {
        Tenant::new_unchecked("acme".into())
    }

    fn memory(
        id: &str,
        memory_type: MemoryType,
        scope: Scope,
        conversation: Option<&Conversation>,
        expires_at: Option<i64>,
    ) -> Memory {
        crate::memory::NewMemory {
            id: id.to_owned(),
            content: "x".into(),
            memory_type,
            category: None,
            tags: vec![],
            created_at: 0,
            scope,
            conversation: conversation.cloned(),
            replaces: None,
            expires_at,
            author: None,
        }
        .into_memory()
    }

    #[test]
    fn ulid_time_reads_the_time_part_of_minted_ids() {
        let ms = 1_780_000_000_123;
        assert_eq!(ulid_time(&crate::memory::new_id(ms)), Some(ms as u64));
        assert_eq!(ulid_time("01J0000000000000000000000"), None); // 25 characters
        assert_eq!(ulid_time("01J00000U0000000000000000A"), None); // U is not Crockford
        assert_eq!(ulid_time("80000000000000000000000000"), None); // past 2^48 - 1
        assert_eq!(ulid_time("7ZZZZZZZZZ0000000000000000"), Some(MAX_TIME));
    }

    #[test]
    fn inverted_time_sorts_newest_first_at_a_fixed_width() {
        let older = inverted_time(1_000).unwrap();
        let newer = inverted_time(2_000).unwrap();
        assert!(newer < older);
        assert_eq!(inverted_time(MAX_TIME).unwrap(), "0000000000");
        assert_eq!(inverted_time(0).unwrap(), "7ZZZZZZZZZ");
        assert_eq!(inverted_time(MAX_TIME + 1), None);
    }

    #[test]
    fn keys_round_trip_and_hide_the_conversation() {
        let chat = Conversation::new_unchecked("chat:1".into());
        let id = crate::memory::new_id(1_780_000_000_000);
        let project = key(
            &tenant(),
            &memory(&id, MemoryType::Pattern, Scope::Project, Some(&chat), None),
        )
        .unwrap();
        assert!(project.starts_with("index/acme/") && project.ends_with(&format!("#{id}#pattern")));
        assert_eq!(
            Entry::parse(&project).unwrap(),
            Entry {
                key: project.clone(),
                tenant: "acme".into(),
                id: id.clone(),
                memory_type: "pattern".into(),
                digest: None,
                expires_at: None,
            }
        );
        let note = key(
            &tenant(),
            &memory(
                &id,
                MemoryType::Conversation,
                Scope::Conversation,
                Some(&chat),
                None,
            ),
        )
        .unwrap();
        assert!(!note.contains("chat:1"));
        let entry = Entry::parse(&note).unwrap();
        let d = digest(&chat);
        assert_eq!(d.len(), 16);
        assert!(
            d.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(entry.digest.as_deref(), Some(d.as_str()));
        assert!(entry.visible_to(Some(&d)) && !entry.visible_to(None));
        assert!(!entry.visible_to(Some("0000000000000000")));
        let not_a_ulid = memory(
            "not-a-ulid",
            MemoryType::Project,
            Scope::Project,
            None,
            None,
        );
        assert_eq!(key(&tenant(), &not_a_ulid), None);
    }

    #[test]
    fn an_expiring_memory_carries_its_expiry_in_a_fifth_part() {
        let chat = Conversation::new_unchecked("chat:1".into());
        let id = crate::memory::new_id(1_780_000_000_000);
        let at = Some(1_790_000_000_000);
        let project = memory(&id, MemoryType::Project, Scope::Project, None, at);
        let project = key(&tenant(), &project).unwrap();
        assert!(project.ends_with(&format!("#{id}#project##e1790000000000")));
        let entry = Entry::parse(&project).unwrap();
        assert_eq!((entry.digest, entry.expires_at), (None, at));
        let note = memory(
            &id,
            MemoryType::Conversation,
            Scope::Conversation,
            Some(&chat),
            at,
        );
        let entry = Entry::parse(&key(&tenant(), &note).unwrap()).unwrap();
        assert_eq!((entry.digest, entry.expires_at), (Some(digest(&chat)), at));
        // Still past every key of the memory, so a page goes on after it.
        assert!(after(&tenant(), &id) > project);
    }

    #[test]
    fn malformed_keys_are_not_entries() {
        for bad in [
            "index/acme/x",
            "index/acme/a#b",
            "index/acme/a##project",
            "index/acme/a#b#",
            "a#b#c#d#e",
            "index/acme/T#id#project##x5",
            "index/acme/T#id#project##e",
            "index/acme/T#id#project##e5#more",
        ] {
            assert_eq!(Entry::parse(bad), None, "{bad}");
        }
        assert!(
            Entry::parse("index/acme/T#id#project#")
                .unwrap()
                .digest
                .is_none()
        );
    }

    proptest::proptest! {
        /// Any memory's key parses back to its id, type and audience, and lists in time
        /// order, newest first.
        #[test]
        fn every_key_parses_back_and_sorts_newest_first(
            tenant in "[a-z0-9][a-z0-9._-]{0,20}",
            times in (0u64..(1 << 48), 0u64..(1 << 48)),
            random in proptest::prelude::any::<u128>(),
            conversation in proptest::option::of("[!-~]{1,40}"),
            kind in 0usize..4,
            expires_at in proptest::option::of(0i64..(1 << 50)),
        ) {
            let tenant = Tenant::new_unchecked(tenant);
            let memory_type = [MemoryType::Project, MemoryType::Pattern, MemoryType::Reference, MemoryType::Conversation][kind];
            let conversation = conversation.map(Conversation::new_unchecked);
            let scope = if conversation.is_some() { Scope::Conversation } else { Scope::Project };
            let id = |ms: u64| format!("{}{}", encode_time(ms), &format!("{:016X}", random)[..16]);
            let (older, newer) = (times.0.min(times.1), times.0.max(times.1));
            let keys: Vec<String> = [older, newer]
                .iter()
                .map(|ms| key(&tenant, &memory(&id(*ms), memory_type, scope, conversation.as_ref(), expires_at)).unwrap())
                .collect();
            let entry = Entry::parse(&keys[0]).unwrap();
            proptest::prop_assert_eq!(&entry.id, &id(older));
            proptest::prop_assert_eq!(entry.memory_type.as_str(), memory_type.as_str());
            proptest::prop_assert_eq!(entry.digest.clone(), conversation.as_ref().map(digest));
            proptest::prop_assert_eq!(entry.expires_at, expires_at);
            proptest::prop_assert_eq!(entry.tenant.as_str(), tenant.as_str());
            proptest::prop_assert!(entry.visible_to(conversation.as_ref().map(digest).as_deref()));
            proptest::prop_assert_eq!(entry.visible_to(None), conversation.is_none());
            proptest::prop_assert!(keys[0].starts_with(&prefix(&tenant)));
            proptest::prop_assert!(keys[1] <= keys[0], "newer sorts first");
            proptest::prop_assert_eq!(ulid_time(&id(older)), Some(older));
        }
    }
}
