//! Structured events, one JSON object per line (docs/configuration.md#logging), written by
//! tracing's JSON formatter: `info` to stdout, `error` to stderr. The context fields are a
//! closed set (`Fields`), and these two functions are the only way the server logs, so
//! memory content, queries, tags and conversation ids cannot be logged by accident.

use tracing::Level;
use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};

/// The only context a log line may carry.
#[derive(Debug, Default, Clone)]
pub struct Fields<'a> {
    pub tenant: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub ms: Option<u128>,
    pub ok: Option<bool>,
    pub in_conversation: Option<bool>,
    /// The credential's name (`key:NAME`, `oauth:SUB`), never its value.
    pub credential: Option<&'a str>,
}

/// Sends this process's events as JSON lines, once, at start: for the HTTP server, errors
/// to stderr and the rest to stdout; with `stdout_taken` (stdio's protocol, or a command's
/// output) all of them to stderr. A line that cannot be written is lost, and the process
/// goes on.
pub fn init(stdout_taken: bool) {
    let rest = if stdout_taken {
        BoxMakeWriter::new(std::io::stderr)
    } else {
        BoxMakeWriter::new(std::io::stdout)
    };
    let writer = std::io::stderr.with_max_level(Level::ERROR).or_else(rest);
    // The line names its level itself, lowercase, as operators' queries have always read it.
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .without_time()
        .with_target(false)
        .with_level(false)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer)
        .try_init();
}

/// One line through `$emit` (tracing's `info!` or `error!`): its level, its event, the
/// closed fields, and for an error its message. The fields are written out once, here.
macro_rules! line {
    ($emit:ident, $level:literal, $event:expr, $fields:expr $(, $message:expr)?) => {
        tracing::$emit!(
            level = $level,
            event = $event,
            tenant = $fields.tenant,
            tool = $fields.tool,
            ms = $fields.ms.map(|ms| ms as u64),
            ok = $fields.ok,
            inConversation = $fields.in_conversation,
            credential = $fields.credential,
            $("{}", $message)?
        )
    };
}

pub fn info(event: &str, fields: &Fields) {
    line!(info, "info", event, fields);
}

/// `message` must not carry user data; callers pass error messages of dependencies, which
/// describe the failure (status codes, endpoints), never the request's content.
pub fn error(event: &str, message: &str, fields: &Fields) {
    line!(error, "error", event, fields, message);
}
