//! How a setting's value is read: the parsers every owner of settings (`config`, `store`,
//! `embed`, `library`) declares its variables with, so one refusal reads alike whoever owns the
//! variable: one line naming it, the rule, and what was given; and how a set of variables is
//! read into an owner's clap struct (`read`), with its refusal as one line (`refusal`).

use std::ffi::OsString;

use clap::Parser;
use clap::error::ErrorKind;

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

/// A prompt a model is trained to see before a text, for `name`: kept as given, spaces
/// included (e5 was trained on `query: `, not `query:`), with `\n` read as a line break
/// (Qwen3-Embedding's prompt has one, and an env file cannot) and `\\` as a backslash; at
/// most `PROMPT_CHARS` characters.
pub fn prompt(name: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |raw| {
        if raw.chars().count() > PROMPT_CHARS {
            return Err(format!(
                "{name} must be at most {PROMPT_CHARS} characters, got {}",
                raw.chars().count()
            ));
        }
        let mut read = String::with_capacity(raw.len());
        let mut chars = raw.chars().peekable();
        while let Some(c) = chars.next() {
            let escaped = match (c, chars.peek()) {
                ('\\', Some('n')) => '\n',
                ('\\', Some('\\')) => '\\',
                _ => {
                    read.push(c);
                    continue;
                }
            };
            chars.next();
            read.push(escaped);
        }
        Ok(read)
    }
}

/// The longest prompt: an instruction of a sentence or two, as the instruction-tuned models
/// are given, with room to spare.
pub const PROMPT_CHARS: usize = 1_000;

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

/// The variables whose spaces are part of the value: a model's prompts (`prompt`).
const AS_GIVEN: [&str; 2] = ["EMBEDDING_QUERY_PROMPT", "EMBEDDING_DOCUMENT_PROMPT"];

/// Parses `args` (without the program name) after the variables `var` gives, each as its
/// flag: trimmed (unless `AS_GIVEN`), and left out when blank.
pub fn read<P: Parser>(
    args: Vec<OsString>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<P, clap::Error> {
    let mut command = P::command();
    let mut given: Vec<OsString> = Vec::new();
    if !command.is_no_binary_name_set() {
        given.push(command.get_name().into());
    }
    for arg in command.get_arguments() {
        let (Some(name), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let Some((name, Some(value))) = name.to_str().map(|n| (n, var(n))) else {
            continue;
        };
        if !value.trim().is_empty() {
            let value = if AS_GIVEN.contains(&name) {
                &value
            } else {
                value.trim()
            };
            given.push(format!("--{long}={value}").into());
        }
    }
    given.extend(args);
    // The environment reaches clap only through `var`, above; a flag given twice (by the
    // environment, then the command line) keeps the last.
    command = command
        .mut_args(|arg| arg.env(None))
        .args_override_self(true);
    let matches = command.try_get_matches_from_mut(given)?;
    P::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

/// A clap refusal as the one line an operator reads: a value's own refusal says which
/// variable and what rule; anything else is clap's first line.
pub fn refusal(e: &clap::Error) -> String {
    if e.kind() == ErrorKind::ValueValidation
        && let Some(cause) = std::error::Error::source(e)
    {
        return cause.to_string();
    }
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
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
