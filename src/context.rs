//! Who is asking: the tenant and conversation of a tool call, read from HTTP headers, or
//! for a stdio process from its configuration.
//!
//! This is the only place headers and those variables become identities
//! (docs/identity.md#identity). Tools never take a tenant or conversation argument.

use axum::http::HeaderMap;

pub use crate::auth::Access;
use crate::auth::{Credential, Tenants};
use crate::memory::{Conversation, Tenant, Visibility, trim};

const EXPLICIT_TENANT: &str = "x-memory-tenant";
const STAMPED_TENANT: &str = "x-tenant-id";
const CONVERSATION: &str = "x-conversation-id";

/// The caller's identity as resolved at the HTTP edge, or the refusal to show the model
/// when a tool runs (handshakes and listings need no identity).
pub type Identity = Result<RequestContext, String>;

/// The identity a tool call runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    pub tenant: Tenant,
    pub conversation: Option<Conversation>,
    /// Who the credential says is asking (`key:NAME`, `oauth:SUB`), recorded on what it
    /// writes; None without one (the shared key, an open server, stdio).
    pub author: Option<String>,
    pub access: Access,
}

impl RequestContext {
    /// What the request sees at this instant.
    pub fn visibility(&self) -> Visibility {
        Visibility::now(self.conversation.clone())
    }
}

/// Resolves the caller's identity, or the refusal message to show the model. The
/// conversation is checked first, so when both headers are bad its message wins. The tenant
/// must be one `credential` may use; a credential of exactly one tenant needs no header.
pub fn resolve(headers: &HeaderMap, credential: &Credential) -> Identity {
    let conversation = conversation(headers)?;
    let tenant = match (named_tenant(headers)?, &credential.tenants) {
        (Some(tenant), _) => tenant,
        // A claim the header rules refuse is named as the credential's, not the header's.
        (None, Tenants::Only(only)) if only.len() == 1 => {
            Tenant::parse("the credential's tenant", only[0].clone())?
        }
        (None, _) => return Err(tenant_required()),
    };
    if let Tenants::Only(only) = &credential.tenants
        && !only.iter().any(|t| t == tenant.as_str())
    {
        let who = credential.name.as_deref().unwrap_or("this credential");
        return Err(match only.is_empty() {
            true => format!("{who} may use no tenant: its credential names none"),
            false => format!(
                "{who} may not use tenant \"{}\"; it may use: {}",
                tenant.as_str(),
                only.join(", ")
            ),
        });
    }
    Ok(RequestContext {
        tenant,
        conversation,
        author: credential.name.clone(),
        access: credential.access,
    })
}

/// The identity of a process serving one client over stdio, from `MEMORY_TENANT` (required)
/// and `MEMORY_CONVERSATION`, by the rules of the headers; a refusal names the variable.
pub fn configured(
    tenant: Option<String>,
    conversation: Option<String>,
) -> Result<RequestContext, String> {
    let tenant = tenant.filter(|t| !t.is_empty()).ok_or(
        "MEMORY_TENANT is required: the tenant (project) whose memories this process serves, \
         by the rules of the X-Memory-Tenant header",
    )?;
    let conversation = (conversation.filter(|c| !c.is_empty()))
        .map(|c| Conversation::parse("MEMORY_CONVERSATION", c))
        .transpose()?;
    Ok(RequestContext {
        tenant: Tenant::parse("MEMORY_TENANT", tenant)?,
        conversation,
        author: None,
        access: Access::FULL,
    })
}

/// The single value of a header, trimmed; `Err` when it was sent more than once.
fn single(headers: &HeaderMap, name: &str) -> Result<Option<String>, String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(format!("{name} was sent more than once."));
    }
    // A value that is not valid UTF-8 cannot pass the ASCII rules below; keep it as a
    // lossy string so the refusal names the right rule.
    Ok(first.map(|v| trim(&String::from_utf8_lossy(v.as_bytes())).to_owned()))
}

/// The tenant a header names: `X-Memory-Tenant`, else `X-Tenant-Id`; None when neither is sent
/// (or both are blank).
fn named_tenant(headers: &HeaderMap) -> Result<Option<Tenant>, String> {
    let explicit = single(headers, EXPLICIT_TENANT)?.filter(|v| !v.is_empty());
    let (header, value) = match explicit {
        Some(v) => (EXPLICIT_TENANT, v),
        None => match single(headers, STAMPED_TENANT)?.filter(|v| !v.is_empty()) {
            Some(v) => (STAMPED_TENANT, v),
            None => return Ok(None),
        },
    };
    Tenant::parse(header, value).map(Some)
}

fn tenant_required() -> String {
    format!(
        "{EXPLICIT_TENANT} header is required: set it on the MCP server entry in the registry so \
         this project's memories are kept apart from others'."
    )
}

fn conversation(headers: &HeaderMap) -> Result<Option<Conversation>, String> {
    let Some(value) = single(headers, CONVERSATION)?.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    Conversation::parse(CONVERSATION, value).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        map
    }

    fn tenant_of(pairs: &[(&str, &str)]) -> Result<String, String> {
        resolve(&headers(pairs), &Credential::anyone()).map(|c| c.tenant.as_str().to_owned())
    }

    fn bound(tenants: &[&str]) -> Credential {
        Credential {
            name: Some("key:ci".into()),
            tenants: Tenants::Only(tenants.iter().map(|t| t.to_string()).collect()),
            access: Access {
                read: true,
                write: false,
            },
        }
    }

    #[test]
    fn a_bound_credential_uses_only_its_tenants() {
        let of = |pairs: &[(&str, &str)], credential: &Credential| {
            resolve(&headers(pairs), credential).map(|c| (c.tenant.as_str().to_owned(), c.author))
        };
        let two = bound(&["a", "b"]);
        assert_eq!(
            of(&[("x-memory-tenant", "b")], &two),
            Ok(("b".into(), Some("key:ci".into())))
        );
        let refused = of(&[("x-tenant-id", "c")], &two).unwrap_err();
        assert_eq!(refused, "key:ci may not use tenant \"c\"; it may use: a, b");
        assert!(
            of(&[], &two)
                .unwrap_err()
                .contains("x-memory-tenant header is required")
        );
        // One tenant: the header may be left out, but a header naming another is refused.
        assert_eq!(of(&[], &bound(&["a"])).unwrap().0, "a");
        assert!(of(&[("x-memory-tenant", "b")], &bound(&["a"])).is_err());
        assert!(
            of(&[("x-memory-tenant", "a b")], &bound(&["a"]))
                .unwrap_err()
                .starts_with("x-memory-tenant must")
        );
        assert!(
            of(&[("x-memory-tenant", "a")], &bound(&[]))
                .unwrap_err()
                .contains("may use no tenant")
        );
    }

    #[test]
    fn accepted_tenants() {
        for (raw, want) in [
            ("agent-studio", "agent-studio"),
            ("opspresso.mcp_memory", "opspresso.mcp_memory"),
            ("a", "a"),
            ("Project1", "Project1"),
            ("  demo  ", "demo"),
        ] {
            assert_eq!(tenant_of(&[("x-memory-tenant", raw)]).unwrap(), want);
        }
        let longest = "a".repeat(128);
        assert_eq!(tenant_of(&[("x-tenant-id", &longest)]).unwrap(), longest);
    }

    #[test]
    fn refused_tenants_name_the_header_they_came_on() {
        let too_long = "a".repeat(129);
        for raw in [
            "../other",
            "a/b",
            ".",
            "..",
            "a b",
            "-leading",
            ".hidden",
            too_long.as_str(),
            "not a slug!",
        ] {
            let err = tenant_of(&[("x-tenant-id", raw)]).unwrap_err();
            assert!(err.starts_with("x-tenant-id "), "{raw}: {err}");
            let err = tenant_of(&[("X-Memory-Tenant", raw)]).unwrap_err();
            assert!(err.starts_with("x-memory-tenant "), "{raw}: {err}");
        }
        assert!(
            tenant_of(&[("x-memory-tenant", &too_long)])
                .unwrap_err()
                .contains("x-memory-tenant is too long (max 128 characters)")
        );
        assert!(
            tenant_of(&[("x-memory-tenant", "a/b")])
                .unwrap_err()
                .contains(
                    "x-memory-tenant must start with a letter or digit and contain only letters, \
             digits, '.', '_' or '-'"
                )
        );
    }

    #[test]
    fn explicit_beats_stamped_and_blank_explicit_yields() {
        let both = [("x-memory-tenant", "explicit"), ("x-tenant-id", "stamped")];
        assert_eq!(tenant_of(&both).unwrap(), "explicit");
        let blank = [("x-memory-tenant", "   "), ("x-tenant-id", "stamped")];
        assert_eq!(tenant_of(&blank).unwrap(), "stamped");
        // A bad explicit value is refused, not skipped in favour of the stamped one.
        let bad = [("x-memory-tenant", "a b"), ("x-tenant-id", "stamped")];
        assert!(tenant_of(&bad).unwrap_err().starts_with("x-memory-tenant"));
    }

    #[test]
    fn missing_tenant_names_the_explicit_header() {
        for pairs in [&[][..], &[("x-tenant-id", "  ")][..]] {
            let err = tenant_of(pairs).unwrap_err();
            assert!(err.contains("x-memory-tenant header is required"), "{err}");
            assert!(err.contains("set it on the MCP server entry in the registry"));
        }
    }

    #[test]
    fn duplicated_headers_are_refused() {
        let err = tenant_of(&[("x-memory-tenant", "a"), ("x-memory-tenant", "b")]).unwrap_err();
        assert!(err.contains("x-memory-tenant was sent more than once"));
        let err = tenant_of(&[("x-tenant-id", "a"), ("x-tenant-id", "b")]).unwrap_err();
        assert!(err.contains("x-tenant-id was sent more than once"));
        let err = resolve(
            &headers(&[
                ("x-tenant-id", "a"),
                ("x-conversation-id", "c1"),
                ("x-conversation-id", "c2"),
            ]),
            &Credential::anyone(),
        )
        .unwrap_err();
        assert!(err.contains("x-conversation-id was sent more than once"));
    }

    fn conversation_of(raw: &str) -> Result<Option<String>, String> {
        resolve(
            &headers(&[("x-tenant-id", "t"), ("x-conversation-id", raw)]),
            &Credential::anyone(),
        )
        .map(|c| c.conversation.map(|c| c.as_str().to_owned()))
    }

    #[test]
    fn conversation_rules() {
        for (raw, want) in [
            ("chat:0d1e-4f", "chat:0d1e-4f"),
            (" slack:C1:1723.45 ", "slack:C1:1723.45"),
            (
                "api:9f2c1a:%ED%9A%8C%EC%9D%98-1",
                "api:9f2c1a:%ED%9A%8C%EC%9D%98-1",
            ),
        ] {
            assert_eq!(conversation_of(raw).unwrap().as_deref(), Some(want));
        }
        let longest = "a".repeat(512);
        assert_eq!(conversation_of(&longest).unwrap(), Some(longest));
        assert_eq!(conversation_of("   ").unwrap(), None);
        assert!(
            conversation_of(&"a".repeat(513))
                .unwrap_err()
                .contains("x-conversation-id is too long (max 512 characters)")
        );
        for raw in ["has space", "회의", "line\tbreak"] {
            assert!(
                conversation_of(raw).unwrap_err().contains(
                    "x-conversation-id may carry printable ASCII only, with no whitespace"
                ),
                "{raw}"
            );
        }
    }

    #[test]
    fn conversation_refusal_wins_over_tenant_refusal() {
        let err = resolve(
            &headers(&[("x-conversation-id", "has space")]),
            &Credential::anyone(),
        )
        .unwrap_err();
        assert!(err.starts_with("x-conversation-id"));
    }

    #[test]
    fn no_conversation_header_means_no_conversation() {
        let ctx = resolve(&headers(&[("x-tenant-id", "t")]), &Credential::anyone()).unwrap();
        assert_eq!(ctx.conversation, None);
    }

    proptest::proptest! {
        /// Any header bytes: an identity that obeys every rule, or a refusal naming the
        /// header; never a panic, and never a tenant other than the trimmed value.
        #[test]
        fn any_header_value_is_a_valid_identity_or_a_named_refusal(
            tenant in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            conversation in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let mut map = HeaderMap::new();
            let (Ok(t), Ok(c)) = (HeaderValue::from_bytes(&tenant), HeaderValue::from_bytes(&conversation)) else {
                return Ok(());
            };
            map.insert(EXPLICIT_TENANT, t);
            map.insert(CONVERSATION, c);
            match resolve(&map, &Credential::anyone()) {
                Ok(ctx) => {
                    let given = String::from_utf8_lossy(&tenant);
                    proptest::prop_assert_eq!(ctx.tenant.as_str(), trim(&given));
                    proptest::prop_assert!(Tenant::parse("t", ctx.tenant.as_str().to_owned()).is_ok());
                    proptest::prop_assert!(ctx.tenant.as_str().len() <= crate::memory::MAX_TENANT_CHARS);
                    if let Some(conversation) = ctx.conversation {
                        proptest::prop_assert!(conversation.as_str().bytes().all(|b| (0x21..=0x7e).contains(&b)));
                    }
                }
                Err(refusal) => proptest::prop_assert!(
                    refusal.starts_with(EXPLICIT_TENANT) || refusal.starts_with(CONVERSATION),
                    "{}", refusal
                ),
            }
        }
    }
}
