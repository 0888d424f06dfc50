//! The benchmark workload of `shared/bench/make_transcript.py`, generated in Rust: an
//! agent transcript of OpenAI-chat-style messages (user turns, assistant replies, tool calls
//! with JSON arguments, tool results of 200 to 2,000 bytes), about 1 KB a message, every
//! tool call paired with its result; and the 3-message turn (user, tool call, tool result)
//! that the "one more turn" benchmark appends.
//!
//! This is a port of the Python generator, down to its random number generator (`CPython`'s
//! Mersenne Twister and the `randint`, `choice`, `choices` and `random` algorithms), so
//! `transcript(n)` equals, message for message and as JSON values, what
//! `make_transcript.py n` prints, and `append_turn()` what `make_transcript.py 0
//! --append-turn` prints (key order inside messages aside; the tool-call `arguments` and the
//! JSON-text tool results are the same bytes).
//!
//! Set `AGENT_SESSION_BENCH_TRANSCRIPT=/path/to/transcript.json` (and optionally
//! `AGENT_SESSION_BENCH_TURN=/path/to/turn.json`) to measure files in that format instead,
//! so the same bytes can be measured beside other systems.

use serde_json::{json, Value};

/// `SEED` of `make_transcript.py`.
const SEED: u32 = 20_251_129;
/// `APPEND_SEED` of `make_transcript.py`: the seed of the appended turn.
const APPEND_SEED: u32 = SEED + 1;

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

const PATH_HEADS: [&str; 5] = ["src", "tests", "benches", "crates/core/src", "docs"];
const EXTENSIONS: [&str; 4] = [".rs", ".toml", ".md", ".json"];
const ID_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

const MT_N: usize = 624;
const MT_M: usize = 397;

/// `random.Random(seed)` of `CPython` for a seed below 2^32: MT19937 seeded with
/// `init_by_array([seed])`, and the few methods the generator calls, with `CPython`'s
/// algorithms, so the same seed gives the same draws.
struct PyRandom {
    state: [u32; MT_N],
    next: usize,
}

impl PyRandom {
    fn new(seed: u32) -> Self {
        let mut mt = [0u32; MT_N];
        // init_genrand(19650218)
        mt[0] = 19_650_218;
        for (i, index) in (1..MT_N).zip(1u32..) {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(index);
        }
        // init_by_array(&[seed]): with a one-word key, `key[j] + j` is always `seed`.
        let mut i = 1;
        for _ in 0..MT_N {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(seed);
            i += 1;
            if i >= MT_N {
                mt[0] = mt[MT_N - 1];
                i = 1;
            }
        }
        for _ in 0..MT_N - 1 {
            let index = u32::try_from(i).expect("i < 624");
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(index);
            i += 1;
            if i >= MT_N {
                mt[0] = mt[MT_N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        PyRandom {
            state: mt,
            next: MT_N,
        }
    }

    fn next_u32(&mut self) -> u32 {
        if self.next >= MT_N {
            for k in 0..MT_N {
                let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % MT_N] & 0x7fff_ffff);
                let mut v = self.state[(k + MT_M) % MT_N] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[k] = v;
            }
            self.next = 0;
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: a float in [0, 1) from 53 random bits.
    fn random(&mut self) -> f64 {
        let a = self.next_u32() >> 5;
        let b = self.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `_randbelow(n)` for 0 < n < 2^32: rejection sampling on `getrandbits(n.bit_length())`.
    fn below(&mut self, n: usize) -> usize {
        let n = u32::try_from(n).expect("the generator draws below 2^32");
        assert!(n > 0, "below(0)");
        let bits = u32::BITS - n.leading_zeros();
        loop {
            let r = self.next_u32() >> (32 - bits);
            if r < n {
                return r as usize;
            }
        }
    }

    /// `randint(lo, hi)`: inclusive of both ends.
    fn randint(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn choice<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }
}

/// Python's `json.dumps` with its default separators (`", "` and `": "`), keeping key
/// order, for the tool-call arguments and the JSON-text tool results.
enum Py {
    Str(String),
    Int(usize),
    Bool(bool),
    List(Vec<Py>),
    Object(Vec<(&'static str, Py)>),
}

impl Py {
    fn dumps(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            // All generated text is ASCII, where serde_json and Python escape alike.
            Py::Str(s) => out.push_str(&Value::from(s.as_str()).to_string()),
            Py::Int(n) => out.push_str(&n.to_string()),
            Py::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Py::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Py::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    Py::Str((*key).to_owned()).write(out);
                    out.push_str(": ");
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

struct Generator {
    rng: PyRandom,
    words: Vec<&'static str>,
}

impl Generator {
    fn new(seed: u32) -> Self {
        Generator {
            rng: PyRandom::new(seed),
            words: WORDS.split_whitespace().collect(),
        }
    }

    fn word(&mut self, range: std::ops::Range<usize>) -> &'static str {
        let index = range.start + self.rng.below(range.len());
        self.words[index]
    }

    fn any_word(&mut self) -> &'static str {
        self.word(0..self.words.len())
    }

    /// `_text(rng, lo, hi)`: sentences of random words, cut to a random length.
    fn text(&mut self, lo: usize, hi: usize) -> String {
        let target = self.rng.randint(lo, hi);
        let mut out: Vec<String> = Vec::new();
        let (mut n, mut sentence_len) = (0, 0);
        while n < target {
            let w = self.any_word();
            let mut word = if sentence_len == 0 {
                capitalize(w)
            } else {
                w.to_owned()
            };
            n += w.len() + 1;
            sentence_len += 1;
            if sentence_len > self.rng.randint(6, 18) {
                word.push('.');
                sentence_len = 0;
            }
            out.push(word);
        }
        let mut text = out.join(" ");
        text.truncate(target);
        text
    }

    fn path(&mut self) -> String {
        let head = self.rng.choice(&PATH_HEADS);
        let name = self.word(20..80);
        let extension = self.rng.choice(&EXTENSIONS);
        format!("{head}/{name}{extension}")
    }

    fn dir(&mut self) -> String {
        let mut path = self.path();
        if let Some(slash) = path.rfind('/') {
            path.truncate(slash);
        }
        path
    }

    fn tool_args(&mut self, tool: &str) -> Py {
        match tool {
            "read_file" => {
                let start = self.rng.randint(1, 400);
                let path = self.path();
                let end = start + self.rng.randint(10, 120);
                Py::Object(vec![
                    ("path", Py::Str(path)),
                    ("start_line", Py::Int(start)),
                    ("end_line", Py::Int(end)),
                ])
            }
            "grep" => {
                let pattern = format!("{}\\s*\\(", self.any_word());
                let path = self.dir();
                let max_results = self.rng.randint(5, 50);
                let case_sensitive = self.rng.random() < 0.5;
                Py::Object(vec![
                    ("pattern", Py::Str(pattern)),
                    ("path", Py::Str(path)),
                    ("max_results", Py::Int(max_results)),
                    ("case_sensitive", Py::Bool(case_sensitive)),
                ])
            }
            "run_shell" => {
                let command = format!("cargo test -p {} -- --nocapture", self.word(20..60));
                let timeout = *self.rng.choice(&[&60, &120, &300]);
                Py::Object(vec![
                    ("command", Py::Str(command)),
                    ("timeout_s", Py::Int(timeout)),
                    ("cwd", Py::Str("/home/dev/repo".to_owned())),
                ])
            }
            "list_dir" => {
                let path = self.dir();
                let recursive = self.rng.random() < 0.3;
                Py::Object(vec![
                    ("path", Py::Str(path)),
                    ("recursive", Py::Bool(recursive)),
                ])
            }
            "http_get" => {
                let word = self.any_word();
                let url = format!(
                    "https://example.invalid/api/{word}/{}",
                    self.rng.randint(1, 9999)
                );
                Py::Object(vec![
                    ("url", Py::Str(url)),
                    (
                        "headers",
                        Py::Object(vec![("accept", Py::Str("application/json".to_owned()))]),
                    ),
                ])
            }
            _ => {
                let query = self.text(20, 120);
                let top_k = self.rng.randint(3, 10);
                Py::Object(vec![("query", Py::Str(query)), ("top_k", Py::Int(top_k))])
            }
        }
    }

    fn tool_result(&mut self, tool: &str) -> String {
        let size = self.rng.randint(200, 2000);
        match tool {
            "read_file" | "grep" => {
                let mut lines = Vec::new();
                let mut n = 0;
                let mut line_no = self.rng.randint(1, 500);
                while n < size {
                    let line = format!("{line_no:>5}: {}", self.text(20, 90));
                    n += line.len() + 1;
                    lines.push(line);
                    line_no += 1;
                }
                let mut text = lines.join("\n");
                text.truncate(size);
                text
            }
            "run_shell" => {
                let body = self.text(size - 60, size - 40);
                let exit_code = *self.rng.choice(&[&0, &0, &0, &1, &101]);
                Py::Object(vec![
                    ("exit_code", Py::Int(exit_code)),
                    ("stdout", Py::Str(body)),
                    ("stderr", Py::Str(String::new())),
                ])
                .dumps()
            }
            "http_get" => {
                let mut items = Vec::new();
                while items.len() * 80 < size - 40 {
                    items.push(Py::Str(self.text(30, 120)));
                }
                Py::Object(vec![
                    ("status", Py::Int(200)),
                    ("body", Py::Object(vec![("items", Py::List(items))])),
                ])
                .dumps()
            }
            _ => self.text(size, size),
        }
    }

    fn call_id(&mut self) -> String {
        let mut id = String::from("call_");
        for _ in 0..24 {
            id.push(char::from(ID_ALPHABET[self.rng.below(ID_ALPHABET.len())]));
        }
        id
    }

    fn user(&mut self) -> Value {
        json!({"role": "user", "content": self.text(100, 900)})
    }

    fn assistant_final(&mut self) -> Value {
        json!({"role": "assistant", "content": self.text(600, 3000)})
    }

    fn tool_round(&mut self) -> [Value; 2] {
        let tool = self.rng.choice(&TOOLS);
        let id = self.call_id();
        let thought = if self.rng.random() < 0.6 {
            self.text(50, 400)
        } else {
            String::new()
        };
        let arguments = self.tool_args(tool).dumps();
        let call = json!({"role": "assistant", "content": thought, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": tool, "arguments": arguments}}
        ]});
        let result = json!({"role": "tool", "tool_call_id": id, "content": self.tool_result(tool)});
        [call, result]
    }

    /// `choices((0, 1, 2, 3), weights=(3, 4, 2, 1))[0]`.
    fn rounds(&mut self) -> usize {
        let x = self.rng.random() * 10.0;
        // bisect_right([3, 7, 9, 10], x, 0, 3)
        [3.0, 7.0, 9.0].iter().filter(|&&c| c <= x).count()
    }
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect()
    })
}

/// Exactly `n` OpenAI-chat messages, as `make_transcript.py n` prints them: turns of a
/// user message, 0 to 3 tool rounds and a final answer; the last turn is cut to fit without
/// orphan tool calls.
pub fn transcript(n: usize) -> Vec<Value> {
    let mut g = Generator::new(SEED);
    let mut messages = Vec::with_capacity(n);
    while messages.len() < n {
        let left = n - messages.len();
        let rounds = g.rounds();
        if 2 + 2 * rounds > left {
            messages.push(g.user());
            let mut remaining = left - 1;
            while remaining >= 2 {
                messages.extend(g.tool_round());
                remaining -= 2;
            }
            if remaining == 1 {
                messages.push(g.assistant_final());
            }
            break;
        }
        messages.push(g.user());
        for _ in 0..rounds {
            messages.extend(g.tool_round());
        }
        messages.push(g.assistant_final());
    }
    assert_eq!(messages.len(), n, "the generator makes exactly n messages");
    messages
}

/// The turn that "save one more turn" appends, as `make_transcript.py 0 --append-turn`
/// prints it: a user message, an assistant tool call and its result (about 2.7 KB).
pub fn append_turn() -> Vec<Value> {
    let mut g = Generator::new(APPEND_SEED);
    let mut turn = vec![g.user()];
    turn.extend(g.tool_round());
    turn
}

fn messages_from(variable: &str) -> Option<Vec<Value>> {
    let path = std::env::var_os(variable)?;
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{variable}={}: cannot read: {e}", path.display()));
    Some(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{variable}={}: not a JSON array of messages: {e}",
            path.display()
        )
    }))
}

/// The transcript from `AGENT_SESSION_BENCH_TRANSCRIPT` if set, else `None`.
pub fn from_env() -> Option<Vec<Value>> {
    messages_from("AGENT_SESSION_BENCH_TRANSCRIPT")
}

/// The turn from `AGENT_SESSION_BENCH_TURN` if set, else `None`.
pub fn turn_from_env() -> Option<Vec<Value>> {
    messages_from("AGENT_SESSION_BENCH_TURN")
}
