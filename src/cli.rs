//! The command line: with no argument the binary serves; the flags answer an operator's
//! questions and exit. `--healthcheck` is what the container image's HEALTHCHECK runs (the
//! image has no shell and no curl).

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use crate::app::App;
use crate::config::{Config, VARIABLES};
use crate::memory::{Tenant, Visibility};
use crate::{SERVER_NAME, SERVER_VERSION};

pub enum Command {
    Serve,
    Version,
    Help,
    CheckConfig,
    Healthcheck,
}

impl Command {
    /// The command `args` (without the program name) ask for.
    pub fn parse(args: &[String]) -> Result<Command, String> {
        match args {
            [] => Ok(Command::Serve),
            [one] => match one.as_str() {
                "--version" | "-V" => Ok(Command::Version),
                "--help" | "-h" => Ok(Command::Help),
                "--check-config" => Ok(Command::CheckConfig),
                "--healthcheck" => Ok(Command::Healthcheck),
                other => Err(format!("unknown argument \"{other}\"; see --help")),
            },
            _ => Err("at most one argument; see --help".into()),
        }
    }
}

pub fn version() -> String {
    format!("{SERVER_NAME} {SERVER_VERSION}")
}

pub fn help() -> String {
    let mut out = format!(
        "{SERVER_NAME} {SERVER_VERSION}: an MCP memory server (POST /mcp, GET /health, GET /metrics)\n\n\
         Usage: {SERVER_NAME} [--version | --help | --check-config | --healthcheck]\n\n\
         With no argument it serves. --check-config validates the configuration, reaches the\n\
         store and the embedder, and exits. --healthcheck asks a server on this machine's PORT\n\
         for /health and exits 0 when it answers 200.\n\n\
         Configuration, from the environment (default in brackets):\n"
    );
    let width = VARIABLES.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    for (name, default, meaning) in VARIABLES {
        out.push_str(&format!("  {name:width$}  {meaning} [{default}]\n"));
    }
    out
}

/// The configuration from the environment, built into the app, and the address to listen
/// on; a refusal is printed as one line and becomes the exit code.
pub async fn boot() -> Result<(App, (IpAddr, u16)), ExitCode> {
    let config = Config::from_env().map_err(|message| {
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
pub async fn check_config() -> ExitCode {
    let app = match boot().await {
        Ok((app, _)) => app,
        Err(code) => return code,
    };
    println!("{}", app.describe());
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
    let everyone = Visibility { conversation: None };
    if let Err(e) = service.store.count_by_type(&probe, &everyone).await {
        eprintln!("the store does not answer: {e}");
        return ExitCode::FAILURE;
    }
    println!("store: answered\nconfiguration OK");
    ExitCode::SUCCESS
}

/// GET /health on 127.0.0.1:$PORT; success only for a 200 within three seconds.
pub fn healthcheck() -> ExitCode {
    let port = std::env::var("PORT")
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .unwrap_or(3000);
    match health_status(port) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("/health answered {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("/health did not answer on port {port}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn health_status(port: u16) -> std::io::Result<u16> {
    let timeout = Duration::from_secs(3);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
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

    #[test]
    fn flags_are_parsed_and_anything_else_is_refused() {
        let parse =
            |args: &[&str]| Command::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert!(matches!(parse(&[]), Ok(Command::Serve)));
        assert!(matches!(parse(&["--version"]), Ok(Command::Version)));
        assert!(matches!(
            parse(&["--check-config"]),
            Ok(Command::CheckConfig)
        ));
        assert!(matches!(
            parse(&["--healthcheck"]),
            Ok(Command::Healthcheck)
        ));
        assert!(parse(&["--serve"]).err().unwrap().contains("--serve"));
        assert!(parse(&["--help", "--version"]).is_err());
    }

    #[test]
    fn help_lists_every_variable_with_its_default() {
        let text = help();
        for (name, default, _) in VARIABLES {
            assert!(
                text.contains(name) && text.contains(&format!("[{default}]")),
                "{name}"
            );
        }
    }
}
