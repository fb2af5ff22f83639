//! The project's own documentation is what the code cites: every `docs/<file>.md#<anchor>`
//! in the repository names a heading (or an anchor the doc sets) that exists, and nothing cites a file the repository
//! does not hold.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A doc's headings, as anchors, and the anchors it sets itself (`<a id="…">`, for a
/// paragraph that is not a heading).
fn anchors(doc: &Path) -> HashSet<String> {
    let text = std::fs::read_to_string(doc).unwrap_or_default();
    let set = regex::Regex::new(r#"<a id="([A-Za-z0-9_-]+)"></a>"#).unwrap();
    (text.lines())
        .filter_map(|l| l.strip_prefix('#').map(|h| h.trim_start_matches('#')))
        .map(anchor)
        .chain(set.captures_iter(&text).map(|c| c[1].to_owned()))
        .collect()
}

/// The files a reader follows citations from: code, scripts, the README and the benchmarks.
fn cited_from(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.')
                && !["target", "docs", "fixtures", "results"].contains(&name.as_str())
            {
                cited_from(&path, found);
            }
        } else if [".rs", ".py", ".sh", ".md", ".toml", ".yaml", ".yml"]
            .iter()
            .any(|ext| name.ends_with(ext))
            || name == "Makefile"
            || name == "Dockerfile"
        {
            found.push(path);
        }
    }
}

#[test]
fn every_citation_names_a_heading_of_the_projects_docs() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    for dir in ["src", "tests", "bench", "scripts", "docker", ".ci"] {
        cited_from(&root.join(dir), &mut files);
    }
    files.extend(["README.md", "BENCHMARKS.md", "Makefile", "Cargo.toml"].map(|f| root.join(f)));
    let citation = regex::Regex::new(r"docs/([a-z_]+)\.md#([A-Za-z0-9_-]+)").unwrap();
    let outside = regex::Regex::new(r"\b(BEHAVIOR|DESIGN|MCP|AWS)\.md").unwrap();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display();
        assert!(
            !outside.is_match(&text),
            "{shown} cites a file that is not in this repository"
        );
        for cited in citation.captures_iter(&text) {
            let doc = root.join("docs").join(format!("{}.md", &cited[1]));
            assert!(
                anchors(&doc).contains(&cited[2]),
                "{shown}: docs/{}.md has no heading #{}",
                &cited[1],
                &cited[2]
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} citations found");
}

/// A citation by title (`docs/models.md, "Abstention"`) names a heading of that doc, as one
/// by anchor does; a title may run onto the next line.
#[test]
fn every_citation_by_title_names_a_heading() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    for dir in ["src", "tests", "bench", "scripts", "docker", ".ci", "docs"] {
        cited_from(&root.join(dir), &mut files);
    }
    files.extend(["README.md", "BENCHMARKS.md", "Makefile"].map(|f| root.join(f)));
    let citation = regex::Regex::new(r#"docs/([a-z_]+)\.md,\s+"([^"]+)""#).unwrap();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display();
        for cited in citation.captures_iter(&text) {
            // A title broken over two comment lines carries the second's marker.
            let words = cited[2].split_whitespace();
            let words = words.filter(|w| !["//!", "///", "//", "#"].contains(w));
            let title = words.collect::<Vec<_>>().join(" ");
            let doc = root.join("docs").join(format!("{}.md", &cited[1]));
            assert!(
                anchors(&doc).contains(&anchor(&title)),
                "{shown}: docs/{}.md has no heading \"{title}\"",
                &cited[1],
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} citations by title found");
}

/// The docs' links to one another (`[…](ranking.md#abstention)`, `[…](#floor)`) and the
/// README's (`docs/….md#…`) land on a heading: a section moved to another file leaves none
/// behind.
#[test]
fn every_link_between_the_docs_lands_on_a_heading() {
    let root = Path::new(ROOT);
    let link = regex::Regex::new(r"\]\(((?:docs/)?[a-z_]+\.md)?#([A-Za-z0-9_-]+)\)").unwrap();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.push(root.join("README.md"));
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let shown = page.strip_prefix(root).unwrap().display();
        for found in link.captures_iter(&text) {
            let target = match found.get(1) {
                Some(file) => page.parent().unwrap().join(file.as_str()),
                None => page.clone(),
            };
            assert!(
                anchors(&target).contains(&found[2]),
                "{shown}: {} has no heading #{}",
                target.strip_prefix(root).unwrap_or(&target).display(),
                &found[2]
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} links found");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor("Recall by words"), "recall-by-words");
    assert_eq!(anchor("2026-07-28 era"), "2026-07-28-era");
    assert_eq!(anchor("`search_docs`"), "search_docs");
    assert_eq!(
        anchor("What every store guarantees"),
        "what-every-store-guarantees"
    );
}
