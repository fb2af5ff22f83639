//! How a setting's value is read: the parsers every owner of settings (`config`, `store`,
//! `embed`, `library`) declares its variables with, so one refusal reads alike whoever owns the
//! variable: one line naming it, the rule, and what was given.

/// A positive integer, for `name`.
pub fn positive(name: &'static str) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |raw| {
        let raw = raw.trim();
        raw.parse::<usize>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| format!("{name} must be a positive integer, got \"{raw}\""))
    }
}

/// A positive integer of at most `most`, for `name`: what a semaphore or a table can hold.
pub fn positive_at_most(
    name: &'static str,
    most: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |raw| match positive(name)(raw)? {
        n if n <= most => Ok(n),
        n => Err(format!("{name} must be at most {most}, got \"{n}\"")),
    }
}

/// `true` or `false`, for `name`.
pub fn flag(name: &'static str) -> impl Fn(&str) -> Result<bool, String> + Clone {
    move |raw| match raw.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(format!("{name} must be true or false, got \"{other}\"")),
    }
}

/// Any non-blank text, trimmed.
pub fn text(raw: &str) -> Result<String, String> {
    Ok(raw.trim().to_owned())
}

/// Where this binary keeps what it needs when nothing is configured (the SQLite file, the
/// local model): `mcp-memory` in the user's data directory, `$XDG_DATA_HOME` or
/// `~/.local/share` on Unix, `%APPDATA%` on Windows; None without a home directory.
pub fn data_dir() -> Option<std::path::PathBuf> {
    use etcetera::BaseStrategy;
    let strategy = etcetera::choose_base_strategy().ok()?;
    Some(strategy.data_dir().join("mcp-memory"))
}

/// A choice the operator made that this binary cannot serve: the feature was left out of
/// the build.
pub fn unavailable(what: &str, feature: &str) -> String {
    format!("{what}, which this build does not include (build with --features {feature})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_variable_and_the_value() {
        let size = positive("DATABASE_POOL_SIZE");
        assert_eq!(size(" 7 "), Ok(7));
        assert_eq!(
            size("0"),
            Err("DATABASE_POOL_SIZE must be a positive integer, got \"0\"".into())
        );
        let label = flag("METRICS_TENANT_LABEL");
        assert_eq!((label("true"), label("false")), (Ok(true), Ok(false)));
        assert_eq!(
            label("yes"),
            Err("METRICS_TENANT_LABEL must be true or false, got \"yes\"".into())
        );
    }
}
