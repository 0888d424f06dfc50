//! The OpenAI-compatible engine: `POST {base}/chat/completions` with tool calls.

use std::sync::Arc;
use std::time::Duration;

use agent_session::{BoxError, Completion, CompletionRequest, Cost, Engine, Message, Usage};
use serde_json::{json, Value};

/// The model used when neither `AGENT_SESSION_MODEL` nor `OPENAI_MODEL` is set.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The endpoint used when `OPENAI_BASE_URL` is not set.
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// How long one request may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(300);
/// How much of an error response body is quoted in the error message.
const SNIPPET_CHARS: usize = 300;

/// Settings read from the environment.
pub struct HttpConfig {
    base_url: String,
    api_key: String,
    /// The model asked for explicitly, if any.
    pub model: Option<String>,
    /// Dollars per million input and output tokens, if `AGENT_SESSION_PRICES` is set.
    prices: Option<(Cost, Cost)>,
}

impl HttpConfig {
    /// The API key from `AGENT_SESSION_API_KEY` or `OPENAI_API_KEY`, if either is set.
    pub fn api_key_from_env() -> Option<String> {
        ["AGENT_SESSION_API_KEY", "OPENAI_API_KEY"]
            .iter()
            .find_map(|name| non_empty_var(name))
    }

    /// The configuration, given the key.
    pub fn from_env(api_key: String) -> Result<Self, String> {
        let prices = match non_empty_var("AGENT_SESSION_PRICES") {
            None => None,
            Some(text) => Some(parse_prices(&text).map_err(|e| {
                format!("AGENT_SESSION_PRICES={text:?} is invalid: {e} (expected `INPUT,OUTPUT` in dollars per million tokens, such as `0.15,0.60`)")
            })?),
        };
        Ok(HttpConfig {
            base_url: non_empty_var("OPENAI_BASE_URL")
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            api_key,
            model: non_empty_var("AGENT_SESSION_MODEL").or_else(|| non_empty_var("OPENAI_MODEL")),
            prices,
        })
    }
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse_prices(text: &str) -> Result<(Cost, Cost), String> {
    let (input, output) = text
        .split_once(',')
        .ok_or("there is no comma between the two prices")?;
    let parse = |p: &str| Cost::parse_usd(p.trim()).map_err(|e| e.to_string());
    Ok((parse(input)?, parse(output)?))
}

/// A client for an OpenAI-compatible Chat Completions endpoint. Cheap to clone.
#[derive(Clone)]
pub struct HttpEngine {
    config: Arc<HttpConfig>,
    agent: ureq::Agent,
}

impl HttpEngine {
    /// An engine with `config`.
    pub fn new(config: HttpConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            // Non-2xx statuses are read and reported here, with the body's explanation.
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .into();
        HttpEngine {
            config: Arc::new(config),
            agent,
        }
    }

    /// The model asked for explicitly, if any.
    pub fn explicit_model(&self) -> Option<&str> {
        self.config.model.as_deref()
    }

    fn request_body(request: &CompletionRequest<'_>) -> Result<String, BoxError> {
        let mut messages = Vec::with_capacity(request.transcript.len() + 1);
        if let Some(system) = request.system_prompt {
            messages.push(json!({"role": "system", "content": system}));
        }
        for message in request.transcript {
            messages.push(message.to_openai_chat()?);
        }
        let mut body = json!({"model": request.model, "messages": messages});
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        Ok(serde_json::to_string(&body)?)
    }

    fn usage(&self, response: &Value, requested_model: &str) -> Usage {
        let count = |pointer: &str| response.pointer(pointer).and_then(Value::as_u64);
        let prompt = count("/usage/prompt_tokens").unwrap_or(0);
        let completion = count("/usage/completion_tokens").unwrap_or(0);
        // OpenAI counts cached prompt tokens inside prompt_tokens; Usage keeps them apart.
        let cached = count("/usage/prompt_tokens_details/cached_tokens")
            .unwrap_or(0)
            .min(prompt);
        let model = response
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(requested_model);
        let mut usage = Usage::new(model)
            .with_tokens(prompt - cached, completion)
            .with_cache_tokens(cached, 0);
        if let Some((input, output)) = self.config.prices {
            usage = usage.with_cost(
                Cost::per_million_tokens(input, prompt)
                    + Cost::per_million_tokens(output, completion),
            );
        }
        usage
    }
}

impl HttpEngine {
    /// One completion of `request`: the assistant's message and its usage. The agent
    /// loop's [`Engine::complete`], and the summary call of `sessions compact`.
    pub async fn ask(&self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let body = Self::request_body(&request)?;
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let agent = self.agent.clone();
        let config = Arc::clone(&self.config);
        let post_url = url.clone();
        // ureq blocks; run it on tokio's blocking pool. If the turn is cancelled (Ctrl-C),
        // the request finishes or times out on its own and its answer is discarded.
        let text = tokio::task::spawn_blocking(move || post(&agent, &post_url, &config, body))
            .await
            .map_err(|e| format!("the request to {url} failed: {e}"))??;
        let response: Value = serde_json::from_str(&text).map_err(|e| {
            format!(
                "the response from {url} is not JSON ({e}): {}",
                snippet(&text)
            )
        })?;
        let message = response.pointer("/choices/0/message").ok_or_else(|| {
            format!(
                "the response from {url} has no choices[0].message: {}",
                snippet(&text)
            )
        })?;
        let message = Message::from_openai_chat(message)?;
        let usage = self.usage(&response, request.model);
        Ok(Completion::new(message, usage))
    }
}

impl Engine for HttpEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        self.ask(request).await
    }
}

/// Sends the request; `Err` for transport failures and non-2xx statuses.
fn post(
    agent: &ureq::Agent,
    url: &str,
    config: &HttpConfig,
    body: String,
) -> Result<String, BoxError> {
    let mut response = agent
        .post(url)
        .header("Authorization", format!("Bearer {}", config.api_key))
        .header("Content-Type", "application/json")
        .send(body)
        .map_err(|e| format!("could not reach {url}: {e}"))?;
    let status = response.status();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("could not read the response from {url}: {e}"))?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!(
            "HTTP {} {} from {url}: {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            snippet(&text)
        )
        .into())
    }
}

/// The start of `text` on one line, for error messages.
fn snippet(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > SNIPPET_CHARS {
        let cut: String = flat.chars().take(SNIPPET_CHARS).collect();
        format!("{cut}…")
    } else if flat.is_empty() {
        "(empty body)".to_owned()
    } else {
        flat
    }
}
