//! The shape docs/architecture.md#layout promises: no cycle between the top-level modules of
//! `src/`, and its table of what each module uses is what the code uses. A module's uses are every `crate::<module>` its code names (its tests included, its
//! comments not); a cycle is reported with its path, so the next engineer sees which use
//! closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Each top-level module, and the other top-level modules its files name.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeMap::<String, BTreeSet<String>>::new();
    let named = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let grouped = regex::Regex::new(r"crate::\{([^}]*)\}").unwrap();
    let mut files = Vec::new();
    walk(Path::new(SRC), &mut files);
    for file in files {
        let relative = file.strip_prefix(SRC).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if ["main", "lib"].contains(&module.as_str()) {
            continue;
        }
        // A comment that names a module cites it; only code depends on it.
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = (text.lines())
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let used = modules.entry(module.clone()).or_default();
        let mut names: Vec<String> = (named.captures_iter(&code))
            .map(|found| found[1].to_owned())
            .collect();
        // `use crate::{a, b::c}` names `a` and `b`.
        for group in grouped.captures_iter(&code) {
            names.extend((group[1].split(',')).filter_map(|path| {
                let first = path.trim().split("::").next()?;
                Some(first.trim().to_owned())
            }));
        }
        used.extend(names.into_iter().filter(|name| *name != module));
    }
    // Only modules of the crate: `crate::SERVER_NAME` and the like are items of lib.rs.
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    for used in modules.values_mut() {
        used.retain(|m| known.contains(m));
    }
    modules
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// A cycle through `from`, as the path of modules that closes it, if there is one.
/// `cleared` holds the modules already known to lead to no cycle.
fn cycle_from(
    from: &str,
    graph: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    cleared: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if cleared.contains(from) {
        return None;
    }
    if let Some(start) = path.iter().position(|m| m == from) {
        let mut cycle = path[start..].to_vec();
        cycle.push(from.to_owned());
        return Some(cycle);
    }
    path.push(from.to_owned());
    for next in &graph[from] {
        if let Some(cycle) = cycle_from(next, graph, path, cleared) {
            return Some(cycle);
        }
    }
    path.pop();
    cleared.insert(from.to_owned());
    None
}

#[test]
fn no_top_level_module_depends_on_itself_through_others() {
    let graph = uses();
    assert!(graph.contains_key("auth") && graph["context"].contains("auth"));
    let mut cleared = BTreeSet::new();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(module, &graph, &mut Vec::new(), &mut cleared) {
            panic!("a cycle between top-level modules: {}", cycle.join(" → "));
        }
    }
}

/// docs/architecture.md's table of uses: each module's row, its uses the names in backticks
/// outside parentheses.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md"))
            .unwrap();
    let start = text.find("| module | uses |").expect("the table of uses");
    let aside = regex::Regex::new(r"\([^)]*\)").unwrap();
    let named = regex::Regex::new(r"`([a-z_]+)`").unwrap();
    let names = |cell: &str| -> BTreeSet<String> {
        let cell = aside.replace_all(cell, "");
        (named.captures_iter(&cell))
            .map(|c| c[1].to_owned())
            .collect()
    };
    (text[start..].lines().skip(2))
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').collect();
            let module = names(cells[1]).into_iter().next().expect("a module");
            (module, names(cells[2]))
        })
        .collect()
}

#[test]
fn the_architecture_s_table_of_uses_is_what_the_code_uses() {
    let (documented, used) = (documented(), uses());
    let modules: BTreeSet<&String> = documented.keys().chain(used.keys()).collect();
    let wrong: Vec<String> = (modules.into_iter())
        .filter(|m| documented.get(*m) != used.get(*m))
        .map(|m| {
            format!(
                "{m}: the table says {:?}, the code uses {:?}",
                documented.get(m),
                used.get(m)
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's table of uses:\n{}",
        wrong.join("\n")
    );
}
