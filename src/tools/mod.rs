//! The tools, protocol-neutral: the MCP layer hands over a tool name, arguments and the
//! caller's identity, and gets back text and an error flag (docs/tools.md#tools). Each
//! tool is one file holding its definition (name, description, parameters), its typed
//! arguments and its `run`; the catalogue and the dispatch are both built from one list,
//! `ToolService::new`, as rmcp's tool router and mini-redis' commands are.

mod args;
pub mod conflict;
mod cursor;
mod forget;
mod list_memories;
mod memory_stats;
pub mod prompts;
mod recall;
mod remember;
mod render;
pub mod resources;
mod schema;
mod search_docs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::context::{Identity, RequestContext};
use crate::embed::{EmbedError, Embedder, Judged, Numbers};
use crate::library::{DocsError, Library};
use crate::log;
use crate::memory::Memory;
use crate::metrics::{Metrics, Outcome};
use crate::store::{MemoryStore, StoreError};

use schema::Definition;

type Arguments = Map<String, Value>;

/// The most memories one answer carries, in bytes of JSON, both copies counted (the text
/// and the structured result): far past what a model reads at once, and what bounds the
/// memory a client that does not take its answer can hold (`http::serve`). A list stops its
/// page there and goes on at its cursor; recall leaves out its lowest results and says so.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// One tool: what `tools/list` shows of it, and what it does with its arguments. A tool is
/// declared once: its `Args` type is both the input schema `tools/list` shows
/// (`schema::input`) and what a call's arguments are read into (`schema::parse`).
#[async_trait]
trait Tool: Send + Sync {
    /// Its arguments, each field described by its doc comment.
    type Args: DeserializeOwned + JsonSchema + Send;

    fn definition(&self) -> &'static Definition;

    /// Runs the tool for `ctx`, with arguments that passed the schema layer.
    async fn run(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: Self::Args,
    ) -> Result<Answer, ToolError>;
}

/// A tool whatever its arguments' type: what the catalogue holds.
#[async_trait]
trait Callable: Send + Sync {
    fn definition(&self) -> &'static Definition;
    fn input(&self) -> Value;
    async fn call(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: &Arguments,
    ) -> Result<Answer, ToolError>;
}

#[async_trait]
impl<T: Tool> Callable for T {
    fn definition(&self) -> &'static Definition {
        Tool::definition(self)
    }

    fn input(&self) -> Value {
        schema::input::<T::Args>()
    }

    async fn call(
        &self,
        service: &ToolService,
        ctx: &RequestContext,
        args: &Arguments,
    ) -> Result<Answer, ToolError> {
        self.run(service, ctx, schema::parse(args)?).await
    }
}

/// A tool this process offers, with its input schema, derived once at start.
struct Offered {
    tool: &'static dyn Callable,
    input: Value,
}

impl Offered {
    fn definition(&self) -> &'static Definition {
        self.tool.definition()
    }

    fn to_json(&self, structured: bool, apps: bool) -> Value {
        self.definition().to_json(&self.input, structured, apps)
    }
}

/// How recall judges the model's similarities and weighs words, and when remember takes a
/// memory for a repeat (`crate::config::Config`): the configuration's numbers, unless the
/// store records a fit for the model.
pub struct Judgement {
    pub numbers: Numbers,
    pub keyword_weight: f64,
}

/// What the tools work with, and the tools this process offers.
pub struct ToolService {
    pub store: Arc<dyn MemoryStore>,
    pub embedder: Arc<dyn Embedder>,
    pub docs: Option<Arc<dyn Library>>,
    /// The configuration's numbers for the model, and what the process judges by once the
    /// store was asked for a fit (`judged`).
    numbers: Numbers,
    judged: tokio::sync::OnceCell<Judged>,
    /// How much a query's words weigh against its meaning in recall; 0 is vector-only.
    pub keyword_weight: f64,
    /// How long one call may take in all (`MCP_REQUEST_TIMEOUT_MS`).
    pub deadline: Duration,
    /// The key that seals a conflict question's state (`conflict`; `MCP_STATE_KEY`).
    pub state_key: [u8; 32],
    pub metrics: Arc<Metrics>,
    /// In the order `tools/list` shows them; a tool not offered is not callable either.
    tools: Vec<Offered>,
    /// `tools/list` without output schemas (before 2025-06-18) and with them, each without
    /// and with the resources of MCP Apps (`[structured][apps]`).
    lists: [[Value; 2]; 2],
}

impl ToolService {
    pub fn new(
        store: Arc<dyn MemoryStore>,
        embedder: Arc<dyn Embedder>,
        docs: Option<Arc<dyn Library>>,
        judgement: Judgement,
        deadline: Duration,
        metrics: Arc<Metrics>,
        state_key: [u8; 32],
    ) -> Self {
        let tools = catalogue(store.exact_counts(), docs.is_some());
        let lists = [false, true].map(|structured| {
            [false, true].map(|apps| {
                Value::Array(
                    (tools.iter())
                        .map(|t| t.to_json(structured, apps))
                        .collect(),
                )
            })
        });
        ToolService {
            store,
            embedder,
            docs,
            numbers: judgement.numbers,
            judged: tokio::sync::OnceCell::new(),
            keyword_weight: judgement.keyword_weight,
            deadline,
            state_key,
            metrics,
            tools,
            lists,
        }
    }

    /// What recall and remember judge the model's similarities by (its thresholds, its
    /// duplicate rule, where they come from): the fit the store records for the model, read
    /// once per process, by the first call that needs it while the store does not answer
    /// (docs/models.md, "The fit, recorded").
    pub async fn judged(&self) -> Result<&Judged, StoreError> {
        let read = || async {
            let model = self.embedder.model();
            crate::store::judged(&*self.store, &self.numbers, &model).await
        };
        self.judged.get_or_try_init(read).await
    }

    /// The `tools` array of `tools/list`, with each tool's `outputSchema` when the
    /// protocol version has structured results, and the resource of its MCP App when the
    /// client shows them (`apps`); it never changes while the process runs.
    pub fn tool_list(&self, structured: bool, apps: bool) -> &Value {
        &self.lists[usize::from(structured)][usize::from(apps)]
    }

    /// Counts one use of each of `used` for `ctx`. The answer is already found: a failure
    /// to count is logged and counted in the metrics, never the caller's error
    /// (docs/ranking.md#usage-recording).
    async fn count_uses(&self, ctx: &RequestContext, tool: &str, used: &[&Memory], at: i64) {
        let visibility = ctx.visibility();
        let counted = self.store.record_access(&ctx.tenant, &visibility, used, at);
        if let Err(e) = counted.await {
            let fields = log::Fields {
                tenant: Some(ctx.tenant.as_str()),
                tool: Some(tool),
                ..Default::default()
            };
            log::error("access_record_failed", &e.to_string(), &fields);
            self.metrics.access_record_failed();
        }
    }

    /// `work`, a run of the tool `tool`'s own function, counted and logged (`tool_call`): a
    /// call, or a prompt or a resource that serves the tool's answer (docs/tools.md#prompts).
    /// A call's failure is logged by `answer` (`tool_failed`), a prompt's or a resource's by
    /// the protocol layer (`resource_failed`).
    async fn counted(
        &self,
        tool: &str,
        ctx: &RequestContext,
        work: impl Future<Output = Result<Answer, ToolError>>,
    ) -> Result<Answer, ToolError> {
        let started = Instant::now();
        let answered = work.await;
        let outcome = match &answered {
            Ok(_) => Outcome::Ok,
            Err(ToolError::Invalid(_)) => Outcome::Invalid,
            Err(_) => Outcome::Failed,
        };
        let tenant = Some(ctx.tenant.as_str());
        (self.metrics).tool_call(tool, tenant, outcome, started.elapsed());
        let fields = log::Fields {
            tenant,
            tool: Some(tool),
            credential: ctx.author.as_deref(),
            ms: Some(started.elapsed().as_millis()),
            ok: Some(answered.is_ok()),
            in_conversation: Some(ctx.conversation.is_some()),
        };
        log::info("tool_call", &fields);
        answered
    }

    /// The name a call of `name` is counted and traced under: only catalogue names, so a
    /// caller cannot mint new series; anything else is `unknown`.
    pub fn label<'a>(&self, name: &'a str) -> &'a str {
        self.find(name).map_or("unknown", |_| name)
    }

    /// Whether the tool `name` changes memories; None for a tool this process does not offer.
    pub fn writes(&self, name: &str) -> Option<bool> {
        self.find(name).map(|t| t.definition().writes())
    }

    fn find(&self, name: &str) -> Option<&Offered> {
        self.tools.iter().find(|t| t.definition().name == name)
    }
}

/// The tools a process offers: which exist depends only on configuration, fixed at start.
/// `exact_counts`: whether the store always counts exactly (`memory_stats`' wording);
/// `docs`: whether a documentation library is configured (`search_docs` exists only then).
fn catalogue(exact_counts: bool, docs: bool) -> Vec<Offered> {
    let mut tools: Vec<&'static dyn Callable> = vec![
        &recall::Recall,
        &remember::Remember,
        &list_memories::ListMemories,
        &forget::Forget,
        if exact_counts {
            &memory_stats::EXACT
        } else {
            &memory_stats::BOUNDED
        },
    ];
    if docs {
        tools.push(&search_docs::SearchDocs);
    }
    (tools.into_iter())
        .map(|tool| Offered {
            tool,
            input: tool.input(),
        })
        .collect()
}

/// What a tool found: the text the model reads, and the same answer as data for programs
/// (`structuredContent`, matching the tool's `outputSchema`; docs/protocol.md#structured-results).
pub struct Answer {
    text: String,
    data: Value,
    links: Vec<Value>,
}

impl Answer {
    fn new(text: impl Into<String>, data: Value) -> Answer {
        Answer {
            text: text.into(),
            data,
            links: Vec::new(),
        }
    }

    /// The resources the answer names (`resources::resource`), for clients that follow links.
    fn linking(mut self, links: Vec<Value>) -> Answer {
        self.links = links;
        self
    }
}

/// A tool's answer: one text block, flagged when it reports a failure, and its data when
/// it succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    pub is_error: bool,
    pub structured: Option<Value>,
    /// The memories it names, as resources (`resource_link` content under 2026-07-28).
    pub links: Vec<Value>,
}

impl ToolResult {
    fn ok(answer: Answer) -> Self {
        ToolResult {
            text: answer.text,
            is_error: false,
            structured: Some(answer.data),
            links: answer.links,
        }
    }

    fn error(text: String) -> Self {
        ToolResult {
            text,
            is_error: true,
            structured: None,
            links: Vec::new(),
        }
    }
}

/// Why a tool could not answer.
#[derive(Debug)]
enum ToolError {
    /// The model's mistake: shown as `Error: …`, never logged as a failure.
    Invalid(String),
    /// A dependency failed: the agent can carry on without its memory.
    Dependency { shown: String, logged: String },
    /// The documentation library failed; nothing to do with the memory store.
    Docs(String),
}

/// A memory's text or label the domain refused is the caller's to fix.
impl From<crate::memory::Invalid> for ToolError {
    fn from(e: crate::memory::Invalid) -> Self {
        ToolError::Invalid(e.0)
    }
}

/// The one place a store's failure becomes what the model reads.
impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            // A memory too large for the store is the caller's to shorten.
            StoreError::Refused { message, .. } => ToolError::Invalid(message),
            not_visible @ StoreError::NotVisible { .. } => {
                ToolError::Invalid(not_visible.to_string())
            }
            other => {
                let message = other.to_string();
                ToolError::Dependency {
                    shown: message.clone(),
                    logged: message,
                }
            }
        }
    }
}

impl From<EmbedError> for ToolError {
    fn from(e: EmbedError) -> Self {
        ToolError::Dependency {
            shown: e.to_string(),
            logged: e.log_message(),
        }
    }
}

impl From<DocsError> for ToolError {
    fn from(e: DocsError) -> Self {
        ToolError::Docs(e.to_string())
    }
}

/// Why a prompt or a resource could not be given; the protocol layer maps it to a JSON-RPC
/// error (a tool never fails at that level: see `call`).
pub enum RequestError {
    /// No resource by that URI for this caller: unknown, gone, or not theirs.
    NotFound(String),
    /// The request cannot be served as sent: no tenant, an unknown prompt, a missing or bad
    /// argument or cursor.
    Invalid(String),
    /// The store, the embedder or the documentation library failed: `shown` worded for the
    /// caller, `logged` for the operator.
    Unavailable { shown: String, logged: String },
}

impl From<ToolError> for RequestError {
    fn from(e: ToolError) -> Self {
        match e {
            ToolError::Invalid(message) => RequestError::Invalid(message),
            ToolError::Dependency { shown, logged } => RequestError::Unavailable {
                shown: store_failed(&shown),
                logged,
            },
            ToolError::Docs(cause) => RequestError::Unavailable {
                shown: cause.clone(),
                logged: cause,
            },
        }
    }
}

/// The caller's context, or why a prompt or a resource cannot be given without one.
fn context(identity: &Identity) -> Result<&RequestContext, RequestError> {
    identity
        .as_ref()
        .map_err(|refusal| RequestError::Invalid(refusal.clone()))
}

/// What a caller reads when the store failed, `shown` being the store's own words: one
/// wording for the tools, resources, prompts and a question's second round.
pub fn store_failed(shown: &str) -> String {
    format!("the memory store could not complete this request — {shown}")
}

/// `text` quoted on one line, at most `chars` characters (`render::quote`), for what the
/// protocol layer echoes of a caller's input.
pub fn quote(text: &str, chars: usize) -> String {
    render::quote(text, chars)
}

/// Runs the tool `name` for the caller. Never fails at the protocol level: every problem
/// is a result with `is_error` set, in the order docs/tools.md#validation gives.
pub async fn call(
    service: &ToolService,
    name: &str,
    arguments: Option<&Value>,
    identity: &Identity,
) -> ToolResult {
    let started = Instant::now();
    answer(service, name, arguments, identity)
        .await
        .unwrap_or_else(|refusal| {
            // Refused before it ran: counted (an unknown name as `unknown`), not logged.
            let tenant = identity.as_ref().ok().map(|ctx| ctx.tenant.as_str());
            let tool = service.label(name);
            (service.metrics).tool_call(tool, tenant, Outcome::Invalid, started.elapsed());
            ToolResult::error(refusal)
        })
}

/// What the tool answered, or why it was refused before it ran.
async fn answer(
    service: &ToolService,
    name: &str,
    arguments: Option<&Value>,
    identity: &Identity,
) -> Result<ToolResult, String> {
    let tool = (service.find(name)).ok_or_else(|| format!("Error: unknown tool \"{name}\"."))?;
    let invalid = |detail: &str| {
        format!("Input validation error: Invalid arguments for tool {name}: {detail}")
    };
    let empty = Map::new();
    let args = match arguments {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => return Err(invalid("arguments must be an object")),
    };
    schema::check(&tool.input, args).map_err(|detail| invalid(&detail))?;
    let ctx = identity.as_ref().map_err(Clone::clone)?;

    // A dependency that hangs past its own timeout, or a pile of them, still ends here
    // (docs/protocol.md#deadlines).
    let run = async {
        let run = tool.tool.call(service, ctx, args);
        (tokio::time::timeout(service.deadline, run).await).unwrap_or_else(|_| {
            let shown = format!(
                "{name} did not finish within {} ms; a write it was making may or may not \
                 have landed (list_memories shows which)",
                service.deadline.as_millis()
            );
            Err(ToolError::Dependency {
                logged: shown.clone(),
                shown,
            })
        })
    };
    let failed = |logged: &str| {
        let fields = log::Fields {
            tenant: Some(ctx.tenant.as_str()),
            tool: Some(name),
            credential: ctx.author.as_deref(),
            ..Default::default()
        };
        log::error("tool_failed", logged, &fields);
    };
    Ok(match service.counted(name, ctx, run).await {
        Ok(answer) => ToolResult::ok(answer),
        Err(ToolError::Invalid(message)) => ToolResult::error(format!("Error: {message}")),
        Err(ToolError::Dependency { shown, logged }) => {
            failed(&logged);
            ToolResult::error(format!("Error: {}", store_failed(&shown)))
        }
        Err(ToolError::Docs(cause)) => {
            failed(&cause);
            ToolResult::error(format!(
                "Error: the documentation index could not be searched — {cause}"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(tools: &[Offered]) -> Vec<&'static str> {
        tools.iter().map(|t| t.definition().name).collect()
    }

    #[test]
    fn the_five_tools_in_order_and_search_docs_only_with_a_library() {
        assert_eq!(
            names(&catalogue(true, false)),
            [
                "recall",
                "remember",
                "list_memories",
                "forget",
                "memory_stats"
            ]
        );
        let aws = catalogue(false, true);
        assert_eq!(names(&aws).last(), Some(&"search_docs"));
        let stats = |tools: &[Offered]| tools[4].definition().description;
        assert!(stats(&aws).contains("lower bounds"));
        assert!(!stats(&catalogue(true, false)).contains("lower bounds"));
    }

    #[test]
    fn every_tool_is_annotated_for_what_it_does() {
        let list: Vec<Value> = (catalogue(true, true).iter())
            .map(|t| t.to_json(true, false))
            .collect();
        let tool = |name: &str| list.iter().find(|t| t["name"] == name).unwrap().clone();
        for read in ["recall", "list_memories", "memory_stats", "search_docs"] {
            let hints = &tool(read)["annotations"];
            assert_eq!(hints["readOnlyHint"], true, "{read}");
            assert_eq!(hints.get("destructiveHint"), None, "{read}");
            assert_eq!(hints["openWorldHint"], read == "search_docs", "{read}");
        }
        assert_eq!(
            tool("forget")["annotations"],
            json!({"title": "Forget a memory", "readOnlyHint": false, "destructiveHint": true,
                   "idempotentHint": true, "openWorldHint": false})
        );
        assert_eq!(
            tool("remember")["annotations"],
            json!({"title": "Remember", "readOnlyHint": false, "destructiveHint": true,
                   "idempotentHint": false, "openWorldHint": false})
        );
        for t in &list {
            assert!(t["title"].as_str().is_some_and(|s| !s.is_empty()));
            assert_eq!(t["title"], t["annotations"]["title"]);
        }
    }

    #[test]
    fn the_listing_has_no_tenant_property_and_says_what_is_required() {
        let list: Vec<Value> = (catalogue(true, true).iter())
            .map(|t| t.to_json(true, false))
            .collect();
        assert!(
            !Value::Array(list.clone())
                .to_string()
                .contains("\"tenant\"")
        );
        assert!(
            list[0]["description"]
                .as_str()
                .unwrap()
                .contains("at the start of a task")
        );
        assert_eq!(list[0]["inputSchema"]["required"], json!(["query"]));
        assert_eq!(
            list[1]["inputSchema"]["properties"]["type"]["enum"],
            json!(["project", "pattern", "reference", "conversation"])
        );
        assert_eq!(
            list[4]["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(list[5]["inputSchema"]["required"], json!(["query"]));
    }
}
