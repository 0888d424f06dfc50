//! The benchmark workload of `shared/bench/make_transcript.py`, generated in Rust: an
//! agent transcript of OpenAI-chat-style messages (user turns, assistant replies, tool calls
//! with JSON arguments, tool results of 200 to 2,000 bytes), about 1 KB a message, every
//! tool call paired with its result. Deterministic for a given N.
//!
//! Set `AGENT_SESSION_BENCH_TRANSCRIPT=/path/to/transcript.json` to measure a transcript
//! file in that format instead (for example one printed by `make_transcript.py`), so the
//! same bytes can be measured beside other systems.

use serde_json::{json, Value};

const WORDS: &str = "the a to of and in is for on with that this it as be by are from at or an \
    function module crate struct trait impl error result option vector string \
    buffer parse config session snapshot store file path test build release \
    cargo rustc compile warning borrow lifetime async await future tokio serde \
    json value field index cache retry timeout request response header token \
    usage cost model prompt message tool call argument output input turn agent \
    harness resume save load atomic rename fsync directory permission mode lock \
    should would could might will can need want check verify ensure handle return \
    update create delete list read write open close flush sync commit rollback \
    first second next previous line column offset byte length size count limit \
    because however therefore instead otherwise also only still already again";

const TOOLS: [&str; 6] = [
    "read_file",
    "grep",
    "run_shell",
    "list_dir",
    "http_get",
    "search_docs",
];

/// xorshift64*: small, fast and deterministic; quality is irrelevant here.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[allow(clippy::cast_possible_truncation)] // the remainder is below `hi - lo + 1`, a usize
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.range(0, items.len() - 1)]
    }
}

fn text(rng: &mut Rng, words: &[&str], lo: usize, hi: usize) -> String {
    let target = rng.range(lo, hi);
    let mut out = String::with_capacity(target + 16);
    let mut sentence = 0;
    while out.len() < target {
        let word = rng.pick(words);
        if !out.is_empty() {
            out.push(' ');
        }
        if sentence == 0 {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(word);
        }
        sentence += 1;
        if sentence > rng.range(6, 18) {
            out.push('.');
            sentence = 0;
        }
    }
    out.truncate(target);
    out
}

fn call_id(rng: &mut Rng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::from("call_");
    for _ in 0..24 {
        id.push(ALPHABET[rng.range(0, ALPHABET.len() - 1)] as char);
    }
    id
}

fn tool_round(rng: &mut Rng, words: &[&str]) -> [Value; 2] {
    let tool = rng.pick(&TOOLS);
    let id = call_id(rng);
    let path = format!("src/{}.rs", rng.pick(&words[20..80]));
    let arguments = match tool {
        "read_file" => {
            let start = rng.range(1, 400);
            json!({"path": path, "start_line": start, "end_line": start + rng.range(10, 120)})
        }
        "grep" => {
            json!({"pattern": format!("{}\\s*\\(", rng.pick(words)), "path": "src", "max_results": rng.range(5, 50), "case_sensitive": rng.range(0, 1) == 1})
        }
        "run_shell" => {
            json!({"command": format!("cargo test -p {} -- --nocapture", rng.pick(&words[20..60])), "timeout_s": 120, "cwd": "/home/dev/repo"})
        }
        "list_dir" => json!({"path": "src", "recursive": rng.range(0, 2) == 0}),
        "http_get" => {
            json!({"url": format!("https://example.invalid/api/{}/{}", rng.pick(words), rng.range(1, 9999)), "headers": {"accept": "application/json"}})
        }
        _ => json!({"query": text(rng, words, 20, 120), "top_k": rng.range(3, 10)}),
    };
    let thought = if rng.range(0, 9) < 6 {
        text(rng, words, 50, 400)
    } else {
        String::new()
    };
    let output = text(rng, words, 200, 2000);
    [
        json!({"role": "assistant", "content": thought, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": tool, "arguments": arguments.to_string()}}
        ]}),
        json!({"role": "tool", "tool_call_id": id, "content": output}),
    ]
}

/// Exactly `n` OpenAI-chat messages: turns of user, 0 to 3 tool rounds, final answer.
pub fn transcript(n: usize) -> Vec<Value> {
    let words: Vec<&str> = WORDS.split_whitespace().collect();
    let mut rng = Rng(20_251_129);
    let mut messages = Vec::with_capacity(n);
    while messages.len() < n {
        let left = n - messages.len();
        let rounds = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3][rng.range(0, 9)];
        messages.push(json!({"role": "user", "content": text(&mut rng, &words, 100, 900)}));
        let mut remaining = left - 1;
        let rounds = if 2 + 2 * rounds > left {
            remaining / 2
        } else {
            rounds
        };
        for _ in 0..rounds {
            messages.extend(tool_round(&mut rng, &words));
            remaining -= 2;
        }
        if remaining >= 1 {
            messages
                .push(json!({"role": "assistant", "content": text(&mut rng, &words, 600, 3000)}));
        }
    }
    messages
}

/// The transcript from `AGENT_SESSION_BENCH_TRANSCRIPT` if set, else `None`.
pub fn from_env() -> Option<Vec<Value>> {
    let path = std::env::var_os("AGENT_SESSION_BENCH_TRANSCRIPT")?;
    let bytes = std::fs::read(&path).expect("AGENT_SESSION_BENCH_TRANSCRIPT names a readable file");
    Some(serde_json::from_slice(&bytes).expect("the transcript file is a JSON array of messages"))
}
