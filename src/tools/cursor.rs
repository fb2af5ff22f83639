//! The `cursor` of `list_memories`: where the next page starts, opaque to the caller. A
//! token names the memory listed last and is bound to the listing it came from — the
//! tenant, the caller's conversation and the type filter — so a token used elsewhere is
//! refused rather than quietly starting a listing it does not belong to. It grants nothing:
//! the store applies the caller's own visibility to every page.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::ToolError;
use crate::context::RequestContext;
use crate::memory::MemoryType;
use crate::store::After;

/// Far above any token this server makes (about 90 characters).
pub const MAX_CURSOR_BYTES: usize = 512;
const VERSION: &str = "1";

/// What a token is bound to.
fn binding(ctx: &RequestContext, memory_type: Option<MemoryType>) -> String {
    let conversation = ctx.conversation.as_ref().map_or("", |c| c.as_str());
    let view = format!(
        "{}\0{conversation}\0{}",
        ctx.tenant.as_str(),
        memory_type.map_or("", MemoryType::as_str)
    );
    let digest = Sha256::digest(view.as_bytes());
    crate::memory::hex(&digest[..8])
}

/// The token that continues after `last` in this listing.
pub fn encode(ctx: &RequestContext, memory_type: Option<MemoryType>, last: &After) -> String {
    let plain = format!(
        "{VERSION}|{}|{}|{}",
        last.created_at,
        last.id,
        binding(ctx, memory_type)
    );
    URL_SAFE_NO_PAD.encode(plain)
}

/// Where `token` continues this listing; refused by name when it is not a token this
/// server made, or one made for another listing.
pub fn decode(
    ctx: &RequestContext,
    memory_type: Option<MemoryType>,
    token: &str,
) -> Result<After, ToolError> {
    let refused = |why: &str| ToolError::Invalid(format!("`cursor` {why}; list again without it."));
    if token.len() > MAX_CURSOR_BYTES {
        return Err(refused(&format!(
            "is longer than {MAX_CURSOR_BYTES} bytes, so not a cursor this server gave out"
        )));
    }
    let malformed = || refused("is not a cursor this server gave out");
    let plain = URL_SAFE_NO_PAD
        .decode(token.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(malformed)?;
    let [version, created_at, id, bound] = plain.split('|').collect::<Vec<_>>()[..] else {
        return Err(malformed());
    };
    let created_at: i64 = created_at.parse().map_err(|_| malformed())?;
    // A token names a memory this server listed, so its instant is one a memory can have:
    // any other was made by hand, and a store would refuse it as out of range.
    let instant = crate::memory::EARLIEST_MS..=crate::memory::LATEST_MS;
    if version != VERSION
        || !instant.contains(&created_at)
        || id.is_empty()
        || id.chars().any(char::is_control)
    {
        return Err(malformed());
    }
    if bound != binding(ctx, memory_type) {
        return Err(refused(
            "belongs to another listing (another project, conversation or type filter)",
        ));
    }
    Ok(After {
        created_at,
        id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Conversation, Tenant};

    fn ctx(tenant: &str, conversation: Option<&str>) -> RequestContext {
        RequestContext {
            tenant: Tenant::new_unchecked(tenant.into()),
            conversation: conversation.map(|c| Conversation::new_unchecked(c.into())),
            author: None,
            access: crate::context::Access::FULL,
        }
    }

    fn message(e: ToolError) -> String {
        match e {
            ToolError::Invalid(m) => m,
            other => panic!("not an argument error: {other:?}"),
        }
    }

    #[test]
    fn a_token_continues_its_own_listing_only() {
        let last = After {
            created_at: 1_780_000_000_123,
            id: "01J0000000000000000000000A".into(),
        };
        let mine = ctx("acme", Some("c1"));
        let token = encode(&mine, Some(MemoryType::Pattern), &last);
        assert!(token.len() < 120, "{token}");
        assert_eq!(
            decode(&mine, Some(MemoryType::Pattern), &token).unwrap(),
            last
        );
        for (other, filter) in [
            (ctx("globex", Some("c1")), Some(MemoryType::Pattern)),
            (ctx("acme", Some("c2")), Some(MemoryType::Pattern)),
            (ctx("acme", None), Some(MemoryType::Pattern)),
            (mine.clone(), None),
        ] {
            let refused = message(decode(&other, filter, &token).unwrap_err());
            assert!(refused.contains("belongs to another listing"), "{refused}");
        }
        for forged in [
            "",
            "not base64!",
            "bm9wZQ",
            &URL_SAFE_NO_PAD.encode("2|1|x|y"),
            &"a".repeat(600),
        ] {
            let refused = message(decode(&mine, Some(MemoryType::Pattern), forged).unwrap_err());
            assert!(refused.starts_with("`cursor` "), "{refused}");
        }
    }
}
