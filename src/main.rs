//! Thin entry point: the command line (`cli`), then configuration → app → serve, with
//! graceful shutdown.

use std::process::ExitCode;
use std::sync::Arc;

use mcp_memory::app::App;
use mcp_memory::config::Variables;
use mcp_memory::{
    SERVER_NAME, SERVER_VERSION, auth, cli, context, http, log, portable, shutdown, stdio,
};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    log::init(cli.command.is_some());
    match cli.command {
        Some(cli::Command::Export { tenants, out }) => {
            portable::export::run(cli.variables, tenants, out).await
        }
        Some(cli::Command::Import { input, reembed }) => {
            portable::import::run(cli.variables, input, reembed).await
        }
        Some(cli::Command::Stdio {
            tenant,
            conversation,
        }) => stdio(cli.variables, tenant, conversation).await,
        Some(cli::Command::Reembed { to_index }) => {
            portable::reembed::run(cli.variables, to_index).await
        }
        Some(cli::Command::Calibrate { dry_run }) => {
            mcp_memory::calibrate::run(cli.variables, dry_run).await
        }
        Some(cli::Command::Model { action }) => cli::model(action).await,
        Some(cli::Command::Keys { action }) => cli::keys(action, cli.variables.auth.mcp_keys_file),
        None if cli.healthcheck => cli::healthcheck(cli.variables.host, cli.variables.port),
        None if cli.check_config => cli::check_config(cli.variables).await,
        None => serve(cli.variables).await,
    }
}

async fn serve(variables: Variables) -> ExitCode {
    let (app, address) = match cli::boot(variables).await {
        Ok((app, address)) => (Arc::new(app), address),
        Err(code) => return code,
    };
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {}:{}: {e}", address.0, address.1);
            return ExitCode::FAILURE;
        }
    };
    tokio::spawn(auth::upkeep(Arc::clone(&app.gate)));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(address.1);
    let reach = match address.0.is_loopback() {
        true => "; loopback only: HOST=0.0.0.0 accepts other machines",
        false => "",
    };
    println!(
        "{SERVER_NAME} v{SERVER_VERSION} listening on {} (POST /mcp){reach}",
        std::net::SocketAddr::new(address.0, port)
    );
    println!("{}", app.describe().await);
    if app.gate.is_open() {
        eprintln!(
            "auth: none (no MCP_API_KEY, MCP_KEYS_FILE or OAUTH_ISSUER), so this server answers \
             ANY caller for any tenant; that is only safe while nothing routes to it from \
             outside this machine or cluster"
        );
    } else {
        println!("{}", app.gate.describe());
    }

    let stopping = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::clone(&stopping);
    let limits = http::Limits {
        header_timeout: app.timeouts.header,
        write_timeout: app.timeouts.write,
        max_connections: app.max_connections,
        max_idle_connections: app.max_idle_connections,
    };
    let server = http::serve(
        listener,
        http::router(Arc::clone(&app)),
        http::at_capacity(Arc::clone(&app)),
        limits,
        Arc::clone(&app.metrics),
        async move {
            shutdown::signal().await;
            stop.notify_one();
        },
    );
    tokio::select! {
        () = server => {}
        // Requests still running at the deadline are abandoned; the flush must happen.
        _ = async { stopping.notified().await; tokio::time::sleep(shutdown::DRAIN_DEADLINE).await } => {}
    }
    finish(&app).await
}

/// MCP over stdio for the one client that started this process, as the configured tenant.
async fn stdio(
    variables: Variables,
    tenant: Option<String>,
    conversation: Option<String>,
) -> ExitCode {
    let caller = match context::configured(tenant, conversation) {
        Ok(caller) => caller,
        Err(refusal) => {
            eprintln!("configuration error: {refusal}");
            return ExitCode::FAILURE;
        }
    };
    let app = match cli::boot(variables).await {
        Ok((app, _)) => Arc::new(app),
        Err(code) => return code,
    };
    eprintln!(
        "{SERVER_NAME} v{SERVER_VERSION} serving MCP on stdio for tenant {}",
        caller.tenant.as_str()
    );
    eprintln!("{}", app.describe().await);
    let signal = shutdown::signal();
    stdio::serve(Arc::clone(&app), caller, signal, shutdown::DRAIN_DEADLINE).await;
    finish(&app).await
}

/// After the last request: the sweep stops, the store is flushed once and let go.
async fn finish(app: &App) -> ExitCode {
    app.sweeper.stop().await;
    if let Err(e) = app.tools.store.flush().await {
        log::error(
            "stats_final_flush_failed",
            &e.to_string(),
            &log::Fields::default(),
        );
    }
    app.tools.store.close().await;
    app.traces.shutdown().await;
    ExitCode::SUCCESS
}
