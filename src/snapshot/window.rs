//! Decoding a stored snapshot from its file a window at a time.
//!
//! A snapshot is one JSON document, and `serde_json` parses fastest from a slice of it
//! whole. Holding the file's bytes while its parsed form is built makes a load peak at the
//! bytes plus the parsed session: for a transcript of a million short messages that was
//! 60 MB of bytes beside 150 MB of messages. So the document is read in windows: the
//! top-level object's fields, and the items of its three lists one by one, are each parsed
//! from a slice of the window with `serde_json` (as fast as a whole-slice parse), and the
//! window moves on, so what is held is the parsed session plus a window of a megabyte or
//! two.
//!
//! Only the shape this crate writes is read this way: an object of the current schema
//! version's fields, each once. Anything else (another version, an unknown or repeated
//! field, damage of any kind) is read whole by the ordinary decoder instead, which then
//! gives exactly the answer, and the error message, it always gives.

use std::io::{self, Read, Seek, SeekFrom};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::usage_list;
use super::Lineage;
use crate::id::{Revision, SessionId};
use crate::json::{self, Field, ObjectOnly, StrictMap};
use crate::snapshot::{PersistedOptions, SessionSnapshot, ToolCallRecord, SCHEMA_VERSION};
use crate::transcript::{message_depth, Message};
use crate::usage::Usage;

/// How much of the file is read at a time.
const CHUNK: usize = 1 << 20;
/// The least of a window's messages decoded on several threads: fewer are decoded on the
/// calling thread, where starting threads would cost more than they save.
const MIN_BATCH: usize = 256 * 1024;
/// The most threads a transcript is decoded on.
const MAX_THREADS: usize = 4;
/// What this crate writes between two messages of a transcript: the end of one message
/// object, a comma, and the start of the next, whose first member is its role. Found in a
/// window, it is where a thread may start decoding messages; the bytes may also occur
/// elsewhere (in a nested value), so a thread's start is trusted only once the messages
/// before it were decoded up to it.
const MESSAGE_SEAM: &[u8] = b"},{\"role\":";
/// How many bytes must follow a value in the window before it is taken as whole: a number
/// cut by the window's end would parse as a shorter number.
const SLACK: usize = 64;
/// What the window holds at least before a usage entry is read directly: room for one
/// with a model name of a few hundred bytes (a longer one is read by `serde_json`, which
/// reads on until it has it whole).
const USAGE_ENTRY_ROOM: usize = 512;

/// Why a window could not go on.
enum Stop {
    Fallback,
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Decodes the snapshot `file` holds (`size` bytes long, as far as its metadata says), not
/// yet validated, reading at most `limit + 1` bytes of it. `Ok(None)` if it is not in the
/// shape this module reads: the file's position is then back at its start, to decode the
/// whole file instead, which gives the right answer or error.
///
/// # Errors
///
/// The I/O error of a failed read or seek, or [`TooLarge`] if the file holds more than
/// `limit` bytes.
pub(crate) fn decode<R: Read + Seek>(
    file: &mut R,
    size: u64,
    limit: u64,
) -> Result<Option<SessionSnapshot>, Failure> {
    let mut window = Window {
        reader: file,
        buf: Vec::new(),
        pos: 0,
        eof: false,
        read: 0,
        size,
        limit,
        chunk: CHUNK,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)),
        min_batch: MIN_BATCH,
    };
    let decoded = window.snapshot();
    match decoded {
        Ok(snapshot) => Ok(Some(snapshot)),
        Err(Stop::Fallback) => {
            file.seek(SeekFrom::Start(0)).map_err(Failure::Io)?;
            Ok(None)
        }
        Err(Stop::Io(e)) if e.kind() == io::ErrorKind::FileTooLarge => Err(Failure::TooLarge),
        Err(Stop::Io(e)) => Err(Failure::Io(e)),
    }
}

/// Why [`decode`] failed.
#[derive(Debug)]
pub(crate) enum Failure {
    Io(io::Error),
    /// The file holds more than the limit.
    TooLarge,
}

struct Window<'r, R> {
    reader: &'r mut R,
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts.
    pos: usize,
    /// Whether the reader has no more bytes.
    eof: bool,
    /// Bytes read from the reader so far.
    read: u64,
    /// The file's size when it was opened, so a small file is read in one small piece.
    size: u64,
    limit: u64,
    /// How much is read at a time, at most (less for the end of a small file).
    chunk: usize,
    /// How many threads decode a window's messages.
    threads: usize,
    /// The least of a window's messages (in bytes) decoded on several threads.
    min_batch: usize,
}

/// What became of an attempt to decode a window's messages on several threads.
enum Batch {
    /// The messages, in order; the window is past them, at the start of the next one.
    Decoded(Vec<Message>),
    /// Too few bytes of whole messages in the window: decode the next one here.
    TooSmall,
    /// A thread's start was not between two messages (or a message did not decode): the
    /// window did not move; decode here from now on.
    Misread,
}

/// The fields of a snapshot, as they are found.
#[derive(Default)]
struct Fields {
    schema_version: bool,
    id: Option<SessionId>,
    revision: Option<Revision>,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
    options: Option<PersistedOptions>,
    metadata: Option<Map<String, Value>>,
    /// Absent, `null` or a lineage; `None` until the field is met.
    lineage: Option<Field<Lineage>>,
    transcript: Option<Vec<Message>>,
    tool_calls: Option<Vec<ToolCallRecord>>,
    usage: Option<Vec<Usage>>,
}

/// Sets `slot` to `value`, unless a field already set it (a repeated field).
fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), Stop> {
    if slot.is_some() {
        return Err(Stop::Fallback);
    }
    *slot = Some(value);
    Ok(())
}

impl<R: Read> Window<'_, R> {
    fn snapshot(&mut self) -> Result<SessionSnapshot, Stop> {
        self.skip_whitespace()?;
        self.expect(b'{')?;
        let mut fields = Fields::default();
        loop {
            self.skip_whitespace()?;
            let key: String = self.value()?;
            self.skip_whitespace()?;
            self.expect(b':')?;
            match key.as_str() {
                "schema_version" => {
                    if fields.schema_version || self.value::<u64>()? != u64::from(SCHEMA_VERSION) {
                        return Err(Stop::Fallback);
                    }
                    fields.schema_version = true;
                }
                "id" => once(&mut fields.id, self.value()?)?,
                "revision" => once(&mut fields.revision, self.value()?)?,
                "created_at" => once(&mut fields.created_at, self.value()?)?,
                "updated_at" => once(&mut fields.updated_at, self.value()?)?,
                "options" => {
                    let ObjectOnly(options) = self.value()?;
                    once(&mut fields.options, options)?;
                }
                "metadata" => {
                    let StrictMap(metadata) = self.value()?;
                    // Parsed on its own, it had the whole depth budget of a document;
                    // inside one it has a level less.
                    if json::map_depth(&metadata) > json::MAX_METADATA_DEPTH {
                        return Err(Stop::Fallback);
                    }
                    once(&mut fields.metadata, metadata)?;
                }
                "lineage" => once(&mut fields.lineage, self.value()?)?,
                "transcript" => once(&mut fields.transcript, self.messages()?)?,
                "tool_calls" => once(&mut fields.tool_calls, self.list()?)?,
                "usage" => once(&mut fields.usage, self.usage()?)?,
                _ => return Err(Stop::Fallback),
            }
            self.skip_whitespace()?;
            match self.next_byte()? {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return Err(Stop::Fallback),
            }
        }
        // Nothing but whitespace may follow.
        self.skip_whitespace()?;
        if self.next_byte()?.is_some() {
            return Err(Stop::Fallback);
        }
        let Fields {
            schema_version: true,
            id: Some(id),
            revision: Some(revision),
            created_at: Some(created_at),
            updated_at: Some(updated_at),
            options: Some(options),
            metadata: Some(metadata),
            lineage,
            transcript: Some(transcript),
            tool_calls: Some(tool_calls),
            usage: Some(usage),
        } = fields
        else {
            return Err(Stop::Fallback);
        };
        Ok(SessionSnapshot::from_decoded(
            id,
            revision,
            (created_at, updated_at),
            options,
            metadata,
            lineage.and_then(Field::into_option),
            (transcript, tool_calls, usage),
        ))
    }

    /// A JSON array of objects, each decoded as a `T`.
    fn list<T: DeserializeOwned>(&mut self) -> Result<Vec<T>, Stop> {
        self.list_with(|_, _| None, SLACK)
    }

    /// The usage entries: as [`list`](Self::list), but each entry in the form the crate
    /// writes is read directly (see `usage_list.rs`), and only others by `serde_json`.
    fn usage(&mut self) -> Result<Vec<Usage>, Stop> {
        self.list_with(usage_list::entry, USAGE_ENTRY_ROOM)
    }

    /// [`list`](Self::list), each item read by `direct` (from the window's bytes at the
    /// item, and the item before it) when it can, with at least `room` bytes in the
    /// window; by `serde_json` otherwise. `direct` must answer `None` for an item cut by
    /// the window's end (it then reads on).
    fn list_with<T: DeserializeOwned>(
        &mut self,
        mut direct: impl FnMut(&[u8], Option<&T>) -> Option<(T, usize)>,
        room: usize,
    ) -> Result<Vec<T>, Stop> {
        self.skip_whitespace()?;
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_whitespace()?;
        if self.peek()? == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            self.fill(room)?;
            let item = if let Some((item, used)) = direct(&self.buf[self.pos..], items.last()) {
                self.pos += used;
                item
            } else {
                let ObjectOnly(item) = self.value()?;
                item
            };
            items.push(item);
            self.skip_whitespace()?;
            match self.next_byte()? {
                Some(b',') => {}
                Some(b']') => return Ok(items),
                _ => return Err(Stop::Fallback),
            }
        }
    }

    /// The transcript: as [`list`](Self::list) of messages, but with the messages of each
    /// window split between threads where the window holds enough of them. A message
    /// nested deeper than a document allows falls back, as for metadata: it sits two
    /// levels inside the document, and was parsed on its own with a whole document's
    /// depth budget.
    fn messages(&mut self) -> Result<Vec<Message>, Stop> {
        self.skip_whitespace()?;
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_whitespace()?;
        if self.peek()? == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        let mut parallel = self.threads > 1;
        loop {
            if parallel {
                match self.message_batch()? {
                    Batch::Decoded(messages) => {
                        items.extend(messages);
                        continue;
                    }
                    Batch::TooSmall => {}
                    Batch::Misread => parallel = false,
                }
            }
            let ObjectOnly(item) = self.value()?;
            if !within_depth(&item) {
                return Err(Stop::Fallback);
            }
            items.push(item);
            self.skip_whitespace()?;
            match self.next_byte()? {
                Some(b',') => self.skip_whitespace()?,
                Some(b']') => return Ok(items),
                _ => return Err(Stop::Fallback),
            }
        }
    }

    /// The whole messages in the window from its position (the start of a message) up to
    /// the last [`MESSAGE_SEAM`] in it, split at seams into one run per thread, each run
    /// decoded on its own thread.
    ///
    /// A run is trusted only if the run before it decoded into messages that end exactly
    /// where it starts: the first run starts at a message, so by induction every trusted
    /// run does, and decodes to exactly the messages a decode from the start would give.
    /// A run with a message nested too deep is not decoded here either (the messages are
    /// then decoded one by one, and that one falls back).
    fn message_batch(&mut self) -> Result<Batch, Stop> {
        self.fill(self.chunk.max(self.min_batch))?;
        let data = &self.buf[self.pos..];
        let Some(last) = memchr::memmem::rfind(data, MESSAGE_SEAM) else {
            return Ok(Batch::TooSmall);
        };
        if last < self.min_batch {
            return Ok(Batch::TooSmall);
        }
        // Runs end at a message's closing brace; the next starts after the comma.
        let mut ends = Vec::with_capacity(self.threads);
        let mut start = 0;
        for k in 1..self.threads {
            let target = (last / self.threads * k).max(start);
            if target >= last {
                break;
            }
            match memchr::memmem::find(&data[target..last], MESSAGE_SEAM) {
                Some(at) => {
                    ends.push(target + at);
                    start = target + at + 2;
                }
                None => break,
            }
        }
        ends.push(last);
        let mut runs = Vec::with_capacity(ends.len());
        let mut start = 0;
        for &end in &ends {
            runs.push(&data[start..=end]);
            start = end + 2;
        }
        let decoded: Vec<Option<Vec<Message>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = runs[1..]
                .iter()
                .map(|&run| {
                    std::thread::Builder::new()
                        .spawn_scoped(scope, move || decode_run(run))
                        .ok()
                })
                .collect();
            let mut decoded = vec![decode_run(runs[0])];
            for (&run, handle) in runs[1..].iter().zip(handles) {
                // A thread that could not start (or panicked) is done here instead.
                decoded.push(
                    handle
                        .and_then(|h| h.join().ok())
                        .unwrap_or_else(|| decode_run(run)),
                );
            }
            decoded
        });
        let mut messages = Vec::new();
        for run in decoded {
            match run {
                Some(run) => messages.extend(run),
                None => return Ok(Batch::Misread),
            }
        }
        self.pos += last + 2;
        Ok(Batch::Decoded(messages))
    }

    /// One JSON value at the window's position, decoded as a `T` by `serde_json` from a
    /// slice of the window, which grows until the value is in it whole.
    fn value<T: DeserializeOwned>(&mut self) -> Result<T, Stop> {
        self.fill(SLACK)?;
        loop {
            let mut stream =
                serde_json::Deserializer::from_slice(&self.buf[self.pos..]).into_iter::<T>();
            let parsed = stream.next();
            let used = stream.byte_offset();
            match parsed {
                // Followed by enough of the window, or by the end of the file: whole.
                Some(Ok(value)) if self.eof || self.pos + used + SLACK <= self.buf.len() => {
                    self.pos += used;
                    return Ok(value);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) if e.is_eof() && !self.eof => {}
                // Only whitespace in the window.
                None if !self.eof => {}
                _ => return Err(Stop::Fallback),
            }
            // The value runs past the window: read on (doubling what is held, so a value
            // larger than a chunk is parsed again at most about twice in all).
            let held = self.buf.len() - self.pos;
            self.fill(held.saturating_mul(2).max(self.chunk))?;
        }
    }

    fn skip_whitespace(&mut self) -> Result<(), Stop> {
        loop {
            while let Some(&byte) = self.buf.get(self.pos) {
                if !matches!(byte, b' ' | b'\n' | b'\t' | b'\r') {
                    return Ok(());
                }
                self.pos += 1;
            }
            if self.eof {
                return Ok(());
            }
            self.fill(1)?;
        }
    }

    fn peek(&mut self) -> Result<Option<u8>, Stop> {
        self.fill(1)?;
        Ok(self.buf.get(self.pos).copied())
    }

    fn next_byte(&mut self) -> Result<Option<u8>, Stop> {
        let byte = self.peek()?;
        if byte.is_some() {
            self.pos += 1;
        }
        Ok(byte)
    }

    fn expect(&mut self, expected: u8) -> Result<(), Stop> {
        match self.next_byte()? {
            Some(byte) if byte == expected => Ok(()),
            _ => Err(Stop::Fallback),
        }
    }

    /// Makes sure at least `wanted` unread bytes are in the window, or the file has ended:
    /// moves the unread part to the front, then reads at least a chunk (or what is left of
    /// the file, and a byte more to see its end).
    fn fill(&mut self, wanted: usize) -> Result<(), Stop> {
        if self.buf.len() - self.pos >= wanted || self.eof {
            return Ok(());
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        let left = self.size.saturating_sub(self.read).saturating_add(1);
        let piece = usize::try_from(left).map_or(self.chunk, |left| left.min(self.chunk));
        // Never more than one byte past the limit, however much a value asks for.
        let allowed = self.limit.saturating_add(1).saturating_sub(self.read);
        let want = (wanted - self.buf.len())
            .max(piece)
            .min(usize::try_from(allowed).unwrap_or(usize::MAX));
        if want == 0 {
            return Err(Stop::Io(io::Error::from(io::ErrorKind::FileTooLarge)));
        }
        let got = self
            .reader
            .by_ref()
            .take(want as u64)
            .read_to_end(&mut self.buf)?;
        self.read += got as u64;
        if self.read > self.limit {
            return Err(Stop::Io(io::Error::from(io::ErrorKind::FileTooLarge)));
        }
        if got < want {
            self.eof = true;
        }
        Ok(())
    }
}

/// Whether `message` is nested no deeper than a stored document allows.
fn within_depth(message: &Message) -> bool {
    message_depth(message) <= json::MAX_MESSAGE_DEPTH
}

/// The messages of `run` (messages separated by commas, nothing after the last), or
/// `None` if it is not that: it did not start at a message, or holds one that does not
/// decode, or one nested too deep.
fn decode_run(run: &[u8]) -> Option<Vec<Message>> {
    let mut messages = Vec::new();
    let mut at = 0;
    loop {
        let mut stream =
            serde_json::Deserializer::from_slice(&run[at..]).into_iter::<ObjectOnly<Message>>();
        let Some(Ok(ObjectOnly(message))) = stream.next() else {
            return None;
        };
        if !within_depth(&message) {
            return None;
        }
        messages.push(message);
        at += stream.byte_offset();
        at += whitespace(&run[at..]);
        match run.get(at) {
            None => return Some(messages),
            Some(b',') => at += 1,
            Some(_) => return None,
        }
    }
}

/// How many bytes of JSON whitespace `bytes` starts with.
fn whitespace(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
        .count()
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
