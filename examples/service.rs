//! An HTTP service that keeps many agent sessions, through the async API.
//!
//! ```sh
//! # PostgreSQL (the store a service shared by several machines uses):
//! AGENT_SESSION_POSTGRES_URL="host=127.0.0.1 user=app dbname=app" \
//!     cargo run --example service --features postgres -- 127.0.0.1:3000
//! # Without PostgreSQL: a file store in a temporary directory.
//! cargo run --example service -- 127.0.0.1:3000
//! ```
//!
//! Then, from another terminal:
//!
//! ```sh
//! curl -s -XPOST localhost:3000/sessions -d '{"model": "scripted-1"}' -H 'content-type: application/json'
//! # {"id":"0193…"}
//! curl -s -XPOST localhost:3000/sessions/0193…/turns -d '{"text": "hello"}' -H 'content-type: application/json'
//! # {"reply":"You said: hello","revision":1}
//! curl -s localhost:3000/sessions           # newest first
//! curl -s localhost:3000/sessions/0193…     # the transcript
//! ```
//!
//! Every request resumes its session from the store (`Harness::resume_session_async`), runs
//! the turn and saves it (`Autosave::EveryTurn`, through `Harness::send`), so any number of
//! service processes can share one PostgreSQL store, and a restarted process loses nothing
//! that was acknowledged. No call blocks the runtime's threads: the PostgreSQL store awaits
//! its queries, the file store runs on tokio's blocking pool. Two requests racing on one
//! session: the second save is refused as a conflict (409) and its turn is not stored.
//!
//! The "model" is a scripted stand-in (no network, no key): replace `Scripted` with a
//! client for your provider.

use std::error::Error as StdError;
use std::sync::Arc;

use agent_session::{
    Autosave, BoxError, Completion, CompletionRequest, ContentBlock, Engine, Error, ErrorKind,
    Harness, Message, SessionId, SessionOptions, SessionStore, Usage,
};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

/// An offline stand-in for a model: answers every message with its text.
struct Scripted;

impl Engine for Scripted {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let said = request
            .transcript
            .last()
            .map(Message::text)
            .unwrap_or_default();
        Ok(Completion::new(
            Message::assistant(vec![ContentBlock::text(format!("You said: {said}"))]),
            Usage::new(request.model).with_tokens(said.len() as u64, 3),
        ))
    }
}

type App = Arc<Harness<fn() -> Scripted>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn StdError>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let (harness, described) = open_harness()?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("serving sessions from {described} on http://{listen}");
    axum::serve(listener, router(harness)).await?;
    Ok(())
}

/// A harness over `store` that saves after every turn.
fn harness<S: SessionStore + 'static>(store: S) -> App {
    Arc::new(
        Harness::builder(store, (|| Scripted) as fn() -> Scripted)
            .autosave(Autosave::EveryTurn)
            .build(),
    )
}

/// The routes of the service.
fn router(harness: App) -> Router {
    Router::new()
        .route("/sessions", post(create).get(list))
        .route("/sessions/{id}", get(show))
        .route("/sessions/{id}/turns", post(turn))
        .with_state(harness)
}

/// A harness over the PostgreSQL store named by `AGENT_SESSION_POSTGRES_URL` (feature
/// `postgres`), or over a file store in a new temporary directory.
fn open_harness() -> Result<(App, String), Box<dyn StdError>> {
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("AGENT_SESSION_POSTGRES_URL") {
        let store = agent_session::PostgresSessionStore::builder().connect(&url)?;
        store.migrate()?;
        return Ok((harness(store), "PostgreSQL".to_owned()));
    }
    let dir = tempfile::tempdir()?.keep();
    let store = agent_session::FileSessionStore::open(&dir)?;
    Ok((harness(store), format!("the file store {}", dir.display())))
}

#[derive(Deserialize)]
struct Create {
    model: Option<String>,
}

/// `POST /sessions`: a new, saved session.
async fn create(State(harness): State<App>, Json(body): Json<Create>) -> Result<Response, Failure> {
    let model = body.model.unwrap_or_else(|| "scripted-1".to_owned());
    let mut session = harness.new_session(SessionOptions::new(model))?;
    let revision = harness.save_session_async(&mut session).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": session.id().as_str(), "revision": revision.as_u64()})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct Turn {
    text: String,
}

/// `POST /sessions/{id}/turns`: one turn, saved before the reply is sent.
async fn turn(
    State(harness): State<App>,
    Path(id): Path<String>,
    Json(body): Json<Turn>,
) -> Result<Json<Value>, Failure> {
    let id = SessionId::parse(&id)?;
    let mut session = harness.resume_session_async(&id, None).await?;
    let outcome = harness.send(&mut session, body.text).await?;
    Ok(Json(json!({
        "reply": outcome.reply,
        "revision": session.revision().as_u64(),
    })))
}

/// `GET /sessions`: the stored sessions, newest first (the first page of 50).
async fn list(State(harness): State<App>) -> Result<Json<Value>, Failure> {
    let page = harness.list_sessions_page_async(50, None).await?;
    let sessions: Vec<Value> = page
        .sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.id.as_str(),
                "revision": s.revision.as_u64(),
                "messages": s.message_count,
                "updated_at": s.updated_at.to_rfc3339(),
            })
        })
        .collect();
    Ok(Json(json!({ "sessions": sessions })))
}

/// `GET /sessions/{id}`: the transcript, as roles and texts.
async fn show(State(harness): State<App>, Path(id): Path<String>) -> Result<Json<Value>, Failure> {
    let id = SessionId::parse(&id)?;
    let snapshot = harness.async_store().load(&id).await?;
    let messages: Vec<Value> = snapshot
        .transcript()
        .iter()
        .map(|m| json!({"role": m.role, "text": m.text()}))
        .collect();
    Ok(Json(
        json!({"id": id.as_str(), "revision": snapshot.revision().as_u64(), "messages": messages}),
    ))
}

/// A store error as an HTTP response: its kind decides the status, its text the body.
struct Failure(Error);

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure(error)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = match self.0.kind() {
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
            ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Engine => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, Json(json!({"error": self.0.to_string()}))).into_response()
    }
}
