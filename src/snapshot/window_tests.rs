//! The windowed decoder against the whole-document one: the same snapshot for every
//! document it reads, at every window size and however the reads are cut, and never an
//! answer of its own for a document it does not read (it falls back instead).

use std::io::{Cursor, Read, Seek, SeekFrom};

use serde_json::{json, Value};

use super::{decode, Window};
use crate::snapshot::SessionSnapshot;
use crate::transcript::{ContentBlock, Message, ToolCall, ToolResult};
use crate::usage::Usage;
use crate::{Lineage, SessionId};

/// A reader that gives at most `step` bytes per read, to cut values anywhere.
struct Trickle {
    inner: Cursor<Vec<u8>>,
    step: usize,
}

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.step);
        self.inner.read(&mut buf[..n])
    }
}

impl Seek for Trickle {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// Decodes `bytes` with reads of `step` bytes and windows of `chunk`, on one thread.
fn windowed(bytes: &[u8], step: usize, chunk: usize) -> Option<SessionSnapshot> {
    windowed_on(bytes, step, chunk, 1)
}

/// [`windowed`] with a window's messages split between `threads` threads wherever it
/// holds more than a few bytes of them.
fn windowed_on(bytes: &[u8], step: usize, chunk: usize, threads: usize) -> Option<SessionSnapshot> {
    let mut reader = Trickle {
        inner: Cursor::new(bytes.to_vec()),
        step,
    };
    let mut window = Window {
        reader: &mut reader,
        buf: Vec::new(),
        pos: 0,
        eof: false,
        read: 0,
        size: bytes.len() as u64,
        limit: u64::MAX,
        chunk,
        threads,
        min_batch: 64,
    };
    window.snapshot().ok()
}

fn documents() -> Vec<(String, Vec<u8>)> {
    let mut documents = Vec::new();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for version in ["v1", "v2"] {
        let dir = fixtures.join(version);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("fixtures")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        for file in files {
            documents.push((
                file.display().to_string(),
                std::fs::read(&file).expect("read"),
            ));
        }
    }
    let id = SessionId::parse("rich").expect("id");
    let rich = SessionSnapshot::builder(id.clone(), "m")
        .system_prompt("s")
        .metadata_entry("title", json!("T \"quoted\" , ] }"))
        .metadata_entry(
            "n",
            json!({"a": [1, 2.5, -0.0, 18_446_744_073_709_551_615_u64]}),
        )
        .lineage(Lineage::new(
            SessionId::parse("parent").expect("id"),
            crate::Revision::from_u64(3),
            0,
            chrono::Utc::now(),
        ))
        .transcript(vec![
            Message::user("a, b ] } \u{e9} \n"),
            Message::assistant(vec![
                ContentBlock::text("x"),
                ContentBlock::tool_call(ToolCall::new("c1", "f", json!({"k": [{}, []]}))),
                ContentBlock::tool_call(ToolCall::with_raw_arguments("c2", "g", "{\"x\": 1}")),
            ]),
            Message::tool_result(ToolResult::new("c1", "ok")),
            Message::tool_result(ToolResult::error("c2", "bad")),
        ])
        // Usage entries read directly (the same model twice), and one with an escape in
        // its model name, read by serde_json.
        .usage(vec![
            Usage::new("m").with_tokens(1, 2),
            Usage::new("m")
                .with_cache_tokens(30, 4)
                .with_cost(crate::Cost::from_nano_usd(u64::MAX)),
            Usage::new("q\"m"),
        ])
        .build()
        .expect("build");
    documents.push(("rich".to_owned(), rich.to_json().expect("encode")));
    // The same, pretty and with spaces around everything.
    let value: Value = serde_json::from_slice(&rich.to_json().expect("encode")).expect("json");
    documents.push((
        "pretty".to_owned(),
        serde_json::to_vec_pretty(&value).expect("pretty"),
    ));
    // Long enough for the transcript to be decoded on several threads, with strings that
    // hold brackets, quotes, backslashes and escapes the item scan must step over.
    let long = SessionSnapshot::builder(SessionId::parse("long").expect("id"), "m")
        .transcript(
            (0..400)
                .map(|i| match i % 4 {
                    0 => Message::user(format!("{i}: {{\"not\": [\"an object\"]}} \\\" ]")),
                    1 => Message::assistant(vec![ContentBlock::text(format!("\u{1F600} {i} }}]"))]),
                    2 => Message::user(format!("line\n{i}\t\\")),
                    _ => Message::assistant(vec![ContentBlock::text("{".repeat(i % 7))]),
                })
                .collect(),
        )
        // Entries across window boundaries, of several models and sizes.
        .usage(
            (0..300_u64)
                .map(|i| {
                    Usage::new(["m", "model-\u{e9}", "x\\y"][(i % 3) as usize])
                        .with_tokens(i * 1_000, i)
                        .with_cache_tokens(i % 5, 0)
                })
                .collect(),
        )
        .build()
        .expect("build");
    documents.push(("long".to_owned(), long.to_json().expect("encode")));
    let value: Value = serde_json::from_slice(&long.to_json().expect("encode")).expect("json");
    documents.push((
        "long pretty".to_owned(),
        serde_json::to_vec_pretty(&value).expect("pretty"),
    ));
    let empty = SessionSnapshot::builder(id, "m").build().expect("build");
    documents.push(("empty".to_owned(), empty.to_json().expect("encode")));
    documents
}

#[test]
fn every_document_decodes_to_what_the_whole_decoder_gives_at_any_window() {
    for (what, bytes) in documents() {
        let whole = SessionSnapshot::decode_unvalidated(&bytes).expect(&what);
        // Documents of an earlier version (the golden fixtures) are upgraded by the whole
        // decoder; the windowed one may leave them to it.
        let written: Value = serde_json::from_slice(&bytes).expect(&what);
        let current = written["schema_version"] == crate::SCHEMA_VERSION;
        for (step, chunk) in [
            (usize::MAX, super::CHUNK),
            (1, 1),
            (3, 7),
            (64, 16),
            (1000, 5),
            (100, 300),
            (usize::MAX, 2000),
        ] {
            for threads in [1, 2, 3] {
                match windowed_on(&bytes, step, chunk, threads) {
                    Some(snapshot) => assert_eq!(
                        snapshot, whole,
                        "{what}, step {step}, chunk {chunk}, {threads} threads"
                    ),
                    None => assert!(
                        !current,
                        "{what} fell back at step {step}, chunk {chunk}, {threads} threads"
                    ),
                }
            }
        }
    }
}

#[test]
fn damaged_documents_never_get_an_answer_the_whole_decoder_would_not_give() {
    let (_, bytes) = documents()
        .into_iter()
        .find(|(what, _)| what == "rich")
        .expect("rich");
    let mut cases: Vec<Vec<u8>> = (0..bytes.len()).map(|cut| bytes[..cut].to_vec()).collect();
    for at in 0..bytes.len() {
        for bit in [0x01, 0x20, 0x80] {
            let mut flipped = bytes.clone();
            flipped[at] ^= bit;
            cases.push(flipped);
        }
    }
    let mut padded = bytes.clone();
    padded.extend_from_slice(b" {}");
    cases.push(padded);
    let mut repeated = bytes.clone();
    let end = repeated.len() - 1;
    repeated.splice(end..end, *b",\"id\":\"rich\"");
    cases.push(repeated);
    for (i, case) in cases.iter().enumerate() {
        let whole = SessionSnapshot::decode_unvalidated(case);
        if let Some(snapshot) = windowed(case, 5, 11) {
            match whole {
                Ok(expected) => assert_eq!(snapshot, expected, "case {i}"),
                Err(e) => {
                    panic!("case {i}: the window decoded what the whole decoder refuses ({e})")
                }
            }
        }
    }
}

#[test]
fn a_fallback_leaves_the_file_at_its_start_and_too_much_is_too_large() {
    let bytes = br#"{"schema_version":1,"id":"x"}"#.to_vec();
    let mut cursor = Cursor::new(bytes.clone());
    assert!(matches!(
        decode(&mut cursor, bytes.len() as u64, u64::MAX),
        Ok(None)
    ));
    assert_eq!(cursor.position(), 0);
    let (_, rich) = documents()
        .into_iter()
        .find(|(what, _)| what == "rich")
        .expect("rich");
    let mut cursor = Cursor::new(rich.clone());
    assert!(matches!(
        decode(&mut cursor, rich.len() as u64, 100),
        Err(super::Failure::TooLarge)
    ));
}

/// Each value is parsed on its own, with a whole document's depth budget; the whole decoder
/// counts the levels around it. At the limits the two must agree.
#[test]
fn values_nested_to_the_limits_decode_alike_and_past_them_fall_back() {
    let nested =
        |levels: usize| -> String { format!("{}1{}", "[".repeat(levels), "]".repeat(levels)) };
    let base = String::from_utf8(
        SessionSnapshot::builder(SessionId::parse("deep").expect("id"), "m")
            .transcript(vec![Message::user("x")])
            .build()
            .expect("build")
            .to_json()
            .expect("encode"),
    )
    .expect("utf-8");
    let mut cases = Vec::new();
    // A message's `other` block holds the value: message, content, block, value.
    for levels in 118..126 {
        let message = format!(
            r#"{{"role":"user","content":[{{"type":"other","value":{}}}]}},"#,
            nested(levels)
        );
        cases.push(base.replacen(
            r#""transcript":["#,
            &format!(r#""transcript":[{message}"#),
            1,
        ));
    }
    for levels in 120..130 {
        cases.push(base.replacen(
            r#""metadata":{}"#,
            &format!(r#""metadata":{{"k":{}}}"#, nested(levels)),
            1,
        ));
    }
    let mut both_sides = (false, false);
    for (i, case) in cases.iter().enumerate() {
        let whole = SessionSnapshot::decode_unvalidated(case.as_bytes());
        match (windowed(case.as_bytes(), 7, 13), whole) {
            (Some(snapshot), Ok(expected)) => {
                assert_eq!(snapshot, expected, "case {i}");
                both_sides.0 = true;
            }
            (Some(_), Err(e)) => panic!("case {i}: decoded what the whole decoder refuses: {e}"),
            (None, Ok(_)) => panic!("case {i}: fell back on a document the whole decoder reads"),
            (None, Err(_)) => both_sides.1 = true,
        }
    }
    assert_eq!(
        both_sides,
        (true, true),
        "the cases reach both sides of each limit"
    );
}

/// The bytes between two messages (`},{"role":`) also occur inside a message, in a nested
/// value outside any string; a thread started there must not be trusted. Whatever the
/// threads and windows, the decode gives what the whole decoder gives.
#[test]
fn message_seams_inside_values_never_split_a_message() {
    let seams = json!([{"a": 1}, {"role": "user"}, {"role": "x"}]);
    let transcript: Vec<Message> = (0..300)
        .map(|i| match i % 3 {
            0 => Message::user(format!("{i} {}", "words ".repeat(i % 11))),
            1 => Message::assistant(vec![
                ContentBlock::Other {
                    value: json!({"type": "x", "nested": seams, "i": i}),
                },
                ContentBlock::text("after"),
            ]),
            _ => Message::user(format!("{i} }},{{\"role\":")),
        })
        .collect();
    let snapshot = SessionSnapshot::builder(SessionId::parse("seams").expect("id"), "m")
        .transcript(transcript)
        .build()
        .expect("build");
    let bytes = snapshot.to_json().expect("encode");
    assert!(
        bytes
            .windows(super::MESSAGE_SEAM.len())
            .filter(|w| *w == super::MESSAGE_SEAM)
            .count()
            > 400,
        "the document holds seams inside messages as well as between them"
    );
    let whole = SessionSnapshot::decode_unvalidated(&bytes).expect("whole");
    for chunk in [97, 1000, 4096, super::CHUNK] {
        for threads in [2, 3, 4] {
            let decoded = windowed_on(&bytes, usize::MAX, chunk, threads);
            assert_eq!(
                decoded.as_ref(),
                Some(&whole),
                "chunk {chunk}, {threads} threads"
            );
        }
    }
}
