//! The agent's tools: a calculator, a file reader confined to the workspace, and a `wait`
//! tool that stands in for slow work (a build, a test run) so Ctrl-C mid-tool can be tried.

use std::fmt::Write as _;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use agent_session::{BoxError, BoxFuture, ToolCall, ToolDefinition, ToolExecutor, ToolOutput};
use serde_json::{json, Value};

use crate::display::{self, escape_controls, Keep};

/// Longest expression the calculator accepts, in bytes.
const MAX_EXPRESSION_LEN: usize = 1_000;
/// Deepest nesting of parentheses and unary signs the calculator accepts.
const MAX_DEPTH: usize = 64;
/// Largest file `read_file` returns whole; longer files are cut at this many bytes.
const MAX_READ_BYTES: u64 = 64 * 1024;
/// Longest `wait`, in seconds.
const MAX_WAIT_SECS: u64 = 600;

/// The tools offered to the model. Each call is echoed on stderr as it starts and ends.
pub struct Tools {
    /// The canonical workspace directory `read_file` is confined to.
    workspace: PathBuf,
}

impl Tools {
    /// Tools whose file reader is confined to `workspace` (resolved once, here).
    pub fn new(workspace: &Path) -> io::Result<Self> {
        Ok(Tools {
            workspace: workspace.canonicalize()?,
        })
    }
}

impl ToolExecutor for Tools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![
            ToolDefinition::new(
                "calculator",
                "Evaluates an arithmetic expression with + - * / and parentheses.",
                json!({
                    "type": "object",
                    "properties": {"expression": {"type": "string", "description": "for example 2*(3+4)"}},
                    "required": ["expression"]
                }),
            ),
            ToolDefinition::new(
                "read_file",
                "Reads a UTF-8 text file inside the workspace (the directory the agent runs in).",
                json!({
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "relative to the workspace"}},
                    "required": ["path"]
                }),
            ),
            ToolDefinition::new(
                "wait",
                "Waits a number of seconds, like a slow build would.",
                json!({
                    "type": "object",
                    "properties": {"seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECS}},
                    "required": ["seconds"]
                }),
            ),
        ]
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            let arguments = call
                .arguments
                .to_value()
                .map_err(|e| format!("the arguments are not valid JSON: {e}"))?;
            eprintln!(
                "  [tool] {} {}",
                escape_controls(&call.name, Keep::Nothing),
                escape_controls(&compact(&arguments), Keep::Nothing)
            );
            let result = match call.name.as_str() {
                "calculator" => string_argument(&arguments, "expression")
                    .and_then(|e| calculate(e).map_err(Into::into))
                    .map(format_number),
                "read_file" => {
                    let path = string_argument(&arguments, "path")?.to_owned();
                    let workspace = self.workspace.clone();
                    // File I/O blocks; keep it off the async task so Ctrl-C stays responsive.
                    tokio::task::spawn_blocking(move || read_file(&workspace, &path))
                        .await
                        .map_err(|e| BoxError::from(format!("the file reader failed: {e}")))
                        .and_then(|r| r.map_err(Into::into))
                }
                "wait" => {
                    let seconds = arguments
                        .get("seconds")
                        .and_then(Value::as_u64)
                        .filter(|s| *s <= MAX_WAIT_SECS)
                        .ok_or_else(|| {
                            format!("`seconds` must be an integer from 0 to {MAX_WAIT_SECS}")
                        })?;
                    tokio::time::sleep(Duration::from_secs(seconds)).await;
                    Ok(format!("waited {seconds} s"))
                }
                other => Err(format!("there is no tool named {other:?}").into()),
            };
            match &result {
                Ok(output) => eprintln!(
                    "  [tool] -> {}",
                    escape_controls(&first_line(output), Keep::Nothing)
                ),
                Err(e) => eprintln!(
                    "  [tool] -> error: {}",
                    escape_controls(&e.to_string(), Keep::Nothing)
                ),
            }
            result.map(ToolOutput::from)
        })
    }
}

fn string_argument<'v>(arguments: &'v Value, name: &str) -> Result<&'v str, BoxError> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the argument `{name}` (a string) is missing").into())
}

/// JSON on one line, for progress messages.
fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The first line of `text`, with a marker if there is more.
pub fn first_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_owned()
    }
}

/// Reads `requested` (relative to `workspace`), refusing anything that resolves outside it.
///
/// `..` components and absolute paths are refused outright; the remaining path is then
/// resolved with `canonicalize`, which follows every symbolic link, and must still lie
/// inside the workspace. Only regular files are read: FIFOs, sockets and devices are
/// refused, and the type is checked on the opened file, after an open that cannot block.
pub fn read_file(workspace: &Path, requested: &str) -> Result<String, String> {
    let relative = Path::new(requested);
    if requested.is_empty() {
        return Err("the path is empty".to_owned());
    }
    if relative.is_absolute() {
        return Err(format!(
            "refused {requested:?}: absolute paths are not allowed; give a path relative to the workspace"
        ));
    }
    if relative
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!(
            "refused {requested:?}: `..` would leave the workspace"
        ));
    }
    let resolved = workspace
        .join(relative)
        .canonicalize()
        .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
    if !resolved.starts_with(workspace) {
        return Err(format!(
            "refused {requested:?}: it resolves (through a symbolic link) to {}, outside the workspace",
            resolved.display()
        ));
    }
    let refused = |file_type| {
        format!(
            "refused {requested:?}: it is {}; only regular files are read",
            display::file_kind(file_type)
        )
    };
    // Refuse what is not a regular file before opening it: a plain open of a FIFO waits
    // for a writer (forever, if none comes), and opening a device runs its driver (a tape
    // drive rewinds, a terminal can become the controlling one).
    let before = std::fs::symlink_metadata(&resolved)
        .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
    if !before.is_file() {
        return Err(refused(before.file_type()));
    }
    // The name can be swapped between that check and the open, so the open cannot block
    // either (O_NONBLOCK returns at once even on a FIFO, and changes nothing for reads of
    // a regular file), follows no link (the path was resolved above, so a link here was
    // put there since), takes no controlling terminal, and the type is checked again on
    // the open file (fstat).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(&resolved)
        .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
    if !meta.is_file() {
        return Err(refused(meta.file_type()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
    let mut text = String::from_utf8(bytes)
        .map_err(|_| format!("refused {requested:?}: it is not UTF-8 text"))?;
    if meta.len() > MAX_READ_BYTES {
        let _ = write!(
            text,
            "\n[truncated: the file has {} bytes; only the first {MAX_READ_BYTES} are shown]",
            meta.len()
        );
    }
    Ok(text)
}

/// Formats a result: integers without a decimal point, others as Rust prints an `f64`.
pub fn format_number(value: f64) -> String {
    // 2^53: every integer up to here is exact in an f64.
    if value == 0.0 {
        "0".to_owned() // not "-0"
    } else if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// Evaluates `+ - * /`, unary signs, parentheses and decimal numbers with a
/// recursive-descent parser (no `eval`, bounded length and nesting depth).
///
/// Grammar: `expr = term (('+'|'-') term)*`, `term = unary (('*'|'/') unary)*`,
/// `unary = ('+'|'-') unary | primary`, `primary = number | '(' expr ')'`.
pub fn calculate(expression: &str) -> Result<f64, String> {
    if expression.len() > MAX_EXPRESSION_LEN {
        return Err(format!(
            "the expression is longer than {MAX_EXPRESSION_LEN} characters"
        ));
    }
    let mut parser = Parser {
        chars: expression.chars().filter(|c| !c.is_whitespace()).collect(),
        at: 0,
        depth: 0,
    };
    if parser.chars.is_empty() {
        return Err("the expression is empty".to_owned());
    }
    let value = parser.expr()?;
    if let Some(c) = parser.peek() {
        return Err(format!("unexpected {c:?} at position {}", parser.at + 1));
    }
    if value.is_finite() {
        Ok(value)
    } else {
        Err("the result is too large".to_owned())
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.at += 1;
            let rhs = self.term()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            self.at += 1;
            let rhs = self.unary()?;
            if op == '*' {
                value *= rhs;
            } else if rhs == 0.0 {
                return Err("division by zero".to_owned());
            } else {
                value /= rhs;
            }
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "the expression nests deeper than {MAX_DEPTH} levels"
            ));
        }
        let value = match self.peek() {
            Some('-') => {
                self.at += 1;
                self.unary().map(|v| -v)
            }
            Some('+') => {
                self.at += 1;
                self.unary()
            }
            _ => self.primary(),
        };
        self.depth -= 1;
        value
    }

    fn primary(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some('(') => {
                self.at += 1;
                let value = self.expr()?;
                if self.peek() == Some(')') {
                    self.at += 1;
                    Ok(value)
                } else {
                    Err(format!("expected ')' at position {}", self.at + 1))
                }
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.at;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                    self.at += 1;
                }
                let text: String = self.chars[start..self.at].iter().collect();
                text.parse::<f64>()
                    .map_err(|_| format!("{text:?} is not a number"))
            }
            Some(c) => Err(format!("unexpected {c:?} at position {}", self.at + 1)),
            None => Err("the expression ends too early".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calculator_follows_precedence_and_refuses_garbage() {
        assert_eq!(calculate("2*(3+4)"), Ok(14.0));
        assert_eq!(calculate("1 - 2 - 3"), Ok(-4.0));
        assert_eq!(calculate("-(2+3)*2"), Ok(-10.0));
        assert_eq!(calculate("7/2"), Ok(3.5));
        assert!(calculate("1/0").is_err());
        assert!(calculate("2+").is_err());
        assert!(calculate("2)").is_err());
        assert!(calculate("abs(2)").is_err());
        assert!(calculate(&"(".repeat(500)).is_err());
    }
}
