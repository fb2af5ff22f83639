//! The memory browser (docs/tools.md#the-memory-browser): one page for a person to see,
//! search and correct what the agent remembered. Its three files are served as they are at
//! `/ui/` (`http::ui`), and as one document, script and style inside, for the hosts of MCP
//! Apps (`tools::resources`), which load a single resource into a frame.

use std::sync::LazyLock;

pub const PAGE: &str = include_str!("browser.html");
pub const SCRIPT: &str = include_str!("browser.js");
pub const STYLE: &str = include_str!("browser.css");

/// The MCP Apps resource, and the media type its hosts recognise.
pub const APP_URI: &str = "ui://mcp-memory/browser";
pub const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";

const STYLE_LINK: &str = r#"<link rel="stylesheet" href="browser.css">"#;
const SCRIPT_TAG: &str = r#"<script src="browser.js" defer></script>"#;

/// The page with its style and script inlined: what `resources/read` of `APP_URI` returns.
pub fn app_document() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        PAGE.replacen(STYLE_LINK, &format!("<style>\n{STYLE}</style>"), 1)
            .replacen(SCRIPT_TAG, &format!("<script>\n{SCRIPT}</script>"), 1)
    });
    &DOCUMENT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryType, Scope};

    #[test]
    fn the_app_document_carries_its_script_and_style_and_fetches_nothing() {
        let document = app_document();
        assert!(PAGE.contains(STYLE_LINK) && PAGE.contains(SCRIPT_TAG));
        assert!(document.contains(STYLE) && document.contains(SCRIPT));
        for external in ["src=", "href=", "@import", "url("] {
            assert!(
                !document.contains(external),
                "{external} in the app document"
            );
        }
        // The script is inlined whole: nothing in it may end its element early.
        assert!(!SCRIPT.to_ascii_lowercase().contains("</script"));
        assert!(!STYLE.to_ascii_lowercase().contains("</style"));
    }

    #[test]
    fn the_page_offers_every_type_and_scope_the_server_knows() {
        let options: Vec<&str> = (PAGE.split("<option value=\"").skip(1))
            .filter_map(|rest| rest.split('"').next())
            .filter(|value| !value.is_empty())
            .collect();
        let mut known: Vec<&str> = MemoryType::NAMES.to_vec();
        known.extend(Scope::NAMES);
        assert_eq!(options, known);
    }

    #[test]
    fn the_page_never_writes_markup_from_data() {
        // Everything a memory holds reaches the page as textContent (browser.js).
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(sink), "browser.js uses {sink}");
        }
    }
}
