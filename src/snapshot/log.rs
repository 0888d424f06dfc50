//! A session's history: the revisions its log holds ([`RevisionInfo`]), every message it
//! ever held and where each stands now ([`History`]), and the state at any revision, all
//! worked out from a checkpoint and the entries after it ([`SessionLog`] for custom
//! stores; [`LogSource`] inside the crate's stores, which decodes bodies lazily).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::entry::{check_body, decode_body, EntryBody, EntryHead, EntryKind, LogEntry};
use super::fold::{
    self, needed_bodies, DecodedBody, Folded, Parts, Ref, Source, Start, Stash, Track,
};
use super::SessionSnapshot;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::transcript::Message;
use crate::usage::Usage;

/// One revision a store keeps of a session: when it was made, what kind of change it was,
/// and how long the view (what the model is sent) was after it.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, EntryKind, MemorySessionStore, Message, RewindTo,
///     SessionId, SessionSnapshot, SessionStore, SessionStoreExt};
///
/// let store = MemorySessionStore::new();
/// let id = SessionId::parse("s")?;
/// store.save(&SessionSnapshot::builder(id.clone(), "m")
///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
///     .build()?)?;
/// store.rewind(&id, RewindTo::LastTurns(1))?;
/// let revisions = store.revisions(&id)?;
/// let kinds: Vec<_> = revisions.iter().map(|r| (r.kind, r.messages)).collect();
/// assert_eq!(kinds, [(EntryKind::Checkpoint, 2), (EntryKind::Rewind, 0)]);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevisionInfo {
    /// The revision.
    pub revision: Revision,
    /// When it was saved: the session's `updated_at` at that revision.
    pub updated_at: DateTime<Utc>,
    /// What it changed ([`EntryKind::Checkpoint`] for the oldest revision kept).
    pub kind: EntryKind,
    /// How many messages the view held after it.
    pub messages: usize,
    /// For a restore, the revision it went back to.
    pub restored_from: Option<Revision>,
}

/// Where a message of a session's history stands at its head revision.
///
/// # Examples
///
/// ```
/// use agent_session::{Revision, Standing};
///
/// let standing = Standing::Rewound { revision: Revision::from_u64(4) };
/// assert!(!standing.is_in_view());
/// assert_eq!(standing.removed_at(), Some(Revision::from_u64(4)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Standing {
    /// In the view, at this index of the transcript: the model sees it.
    InView {
        /// Its index in [`SessionSnapshot::transcript`].
        index: usize,
    },
    /// Taken out by a rewind at this revision.
    Rewound {
        /// The revision of the rewind.
        revision: Revision,
    },
    /// Replaced by a compaction's summary at this revision.
    Compacted {
        /// The revision of the compaction.
        revision: Revision,
    },
    /// Taken out otherwise at this revision: by a restore of an earlier state, or by a
    /// snapshot saved over the session (an edit).
    Replaced {
        /// The revision that took it out.
        revision: Revision,
    },
}

impl Standing {
    /// Whether the model sees the message.
    #[must_use]
    pub fn is_in_view(&self) -> bool {
        matches!(self, Standing::InView { .. })
    }

    /// The revision that took the message out of the view, if it is out.
    #[must_use]
    pub fn removed_at(&self) -> Option<Revision> {
        match *self {
            Standing::InView { .. } => None,
            Standing::Rewound { revision }
            | Standing::Compacted { revision }
            | Standing::Replaced { revision } => Some(revision),
        }
    }

    fn removed(revision: Revision, by: EntryKind) -> Standing {
        match by {
            EntryKind::Rewind => Standing::Rewound { revision },
            EntryKind::Compaction => Standing::Compacted { revision },
            _ => Standing::Replaced { revision },
        }
    }
}

/// A message of a session's history, with when it was saved and where it stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HistoryMessage {
    /// The message.
    pub message: Message,
    /// The revision that saved it (the checkpoint's for messages saved before it).
    pub added_at: Revision,
    /// Where it stands at the head revision.
    pub standing: Standing,
}

/// Everything a session's kept history holds: every message any revision's view held
/// since the oldest revision kept, in the order they were saved, each with where it
/// stands now. [`SessionStore::history`](crate::SessionStore::history) returns it.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, MemorySessionStore, Message, RewindTo, SessionId,
///     SessionSnapshot, SessionStore, SessionStoreExt, Standing};
///
/// let store = MemorySessionStore::new();
/// let id = SessionId::parse("s")?;
/// store.save(&SessionSnapshot::builder(id.clone(), "m")
///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
///     .build()?)?;
/// let rewound = store.rewind(&id, RewindTo::LastTurns(1))?;
/// let history = store.history(&id)?;
/// assert_eq!(history.messages.len(), 2);
/// assert!(history.messages.iter().all(|m| m.standing == Standing::Rewound { revision: rewound.revision() }));
/// assert_eq!(history.view().count(), 0);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct History {
    /// The session.
    pub id: SessionId,
    /// The head revision.
    pub revision: Revision,
    /// The oldest revision kept: history before it was not kept (a retention policy, or a
    /// session saved before the log).
    pub oldest_revision: Revision,
    /// Every message, oldest first.
    pub messages: Vec<HistoryMessage>,
}

impl History {
    /// The messages in the view, in the order the model sees them.
    pub fn view(&self) -> impl Iterator<Item = &Message> {
        let mut in_view: Vec<(usize, &Message)> = self
            .messages
            .iter()
            .filter_map(|m| match m.standing {
                Standing::InView { index } => Some((index, &m.message)),
                _ => None,
            })
            .collect();
        in_view.sort_by_key(|(index, _)| *index);
        in_view.into_iter().map(|(_, m)| m)
    }

    /// The messages out of the view (rewound, compacted or replaced), oldest first.
    pub fn removed(&self) -> impl Iterator<Item = &HistoryMessage> {
        self.messages.iter().filter(|m| !m.standing.is_in_view())
    }
}

/// What a session's log holds beyond its head state: where the kept history starts and
/// how often it was edited. Shown in listings ([`SessionSummary::history`](crate::SessionSummary::history)).
///
/// # Examples
///
/// ```
/// use agent_session::HistoryStats;
///
/// let stats = HistoryStats::default();
/// assert!(!stats.was_edited());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HistoryStats {
    /// The oldest revision the store keeps ([`Revision::NEW`] for a session never saved).
    pub oldest_revision: Revision,
    /// Rewinds in the kept history.
    pub rewinds: u64,
    /// Compactions in the kept history.
    pub compactions: u64,
    /// Restores in the kept history.
    pub restores: u64,
}

impl HistoryStats {
    /// Whether the kept history holds a rewind, a compaction or a restore: the view is
    /// then not all that was said.
    #[must_use]
    pub fn was_edited(&self) -> bool {
        self.rewinds + self.compactions + self.restores > 0
    }

    /// The counts after one more entry of `kind`.
    pub(crate) fn after(mut self, kind: EntryKind) -> Self {
        match kind {
            EntryKind::Rewind => self.rewinds += 1,
            EntryKind::Compaction => self.compactions += 1,
            EntryKind::Restore => self.restores += 1,
            _ => {}
        }
        self
    }
}

/// An entry's body as a store has it: the bytes of its frame, to be decoded only if a
/// view needs it, or already decoded.
#[derive(Debug)]
pub(crate) enum Body<'a> {
    Bytes(&'a [u8]),
    Decoded(EntryBody),
}

/// The bodies of more than this many bytes in all are decoded on every core.
const PARALLEL_BODY_BYTES: usize = 512 * 1024;

/// A session's log as a store read it: the checkpoint, the parent's state a fork shares,
/// the entries' heads (decoded) and bodies (maybe not yet).
#[derive(Debug)]
pub(crate) struct LogSource<'a> {
    /// The checkpoint, decoded but not validated (the fold validates the state it makes).
    pub(crate) checkpoint: SessionSnapshot,
    /// For a fork that shares its parent's messages: the parent at the fork's revision.
    pub(crate) prefix: Option<SessionSnapshot>,
    pub(crate) heads: Vec<EntryHead>,
    pub(crate) bodies: Vec<Body<'a>>,
}

impl<'a> LogSource<'a> {
    /// A log of the checkpoint alone.
    pub(crate) fn new(checkpoint: SessionSnapshot) -> Self {
        LogSource {
            checkpoint,
            prefix: None,
            heads: Vec::new(),
            bodies: Vec::new(),
        }
    }

    /// Adds an entry whose body is still bytes.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the head claims more messages than the body has bytes: a
    /// view is worked out from the heads before any body is read, and must not grow past
    /// what the log can hold.
    pub(crate) fn push_bytes(&mut self, head: EntryHead, body: &'a [u8]) -> Result<()> {
        if head.messages > body.len() {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} says it holds {} messages in a body of {} bytes",
                head.revision,
                head.messages,
                body.len()
            )));
        }
        self.heads.push(head);
        self.bodies.push(Body::Bytes(body));
        Ok(())
    }

    /// The head state of a compacted log read from its view checkpoint: `view`, the state
    /// a compaction entry made (decoded from where a store keeps it), with `entries` (that
    /// compaction's first, then those after it) folded onto it, validated, history counts
    /// `stats` (the log's at the compaction) advanced by each later entry, and marked as
    /// stored at its revision.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the first entry is not a compaction that made `view` (its
    /// revision, time or lengths), or the entries need what the view does not hold (a
    /// restore of a revision before the compaction): the caller reads the whole log then,
    /// which decides.
    pub(crate) fn state_after_view(
        view: SessionSnapshot,
        stats: HistoryStats,
        entries: impl IntoIterator<Item = (EntryHead, &'a [u8])>,
    ) -> Result<SessionSnapshot> {
        let mut entries = entries.into_iter();
        let Some((compaction, _)) = entries.next() else {
            return Err(Error::inconsistent(
                "the view checkpoint has no compaction entry after it",
            ));
        };
        if compaction.kind != EntryKind::Compaction
            || view.revision != compaction.revision
            || view.updated_at != compaction.updated_at
            || view.counts() != compaction.state
        {
            return Err(Error::inconsistent(format!(
                "the view checkpoint is not the state the compaction of revision {} made",
                compaction.revision
            )));
        }
        let mut log = LogSource::new(view);
        let mut stats = stats;
        for (head, body) in entries {
            stats = stats.after(head.kind);
            log.push_bytes(head, body)?;
        }
        let mut snapshot = log.state_at(None)?;
        snapshot.history = stats;
        let revision = snapshot.revision;
        snapshot.mark_stored(revision);
        Ok(snapshot)
    }

    /// Adds a decoded entry.
    pub(crate) fn push(&mut self, entry: LogEntry) {
        self.heads.push(entry.head);
        self.bodies.push(Body::Decoded(entry.body));
    }

    /// The last revision the log holds.
    pub(crate) fn last_revision(&self) -> Revision {
        self.heads
            .last()
            .map_or(self.checkpoint.revision, |h| h.revision)
    }

    fn start(&self) -> Start {
        let prefix = self.prefix_len();
        Start {
            revision: self.checkpoint.revision,
            updated_at: self.checkpoint.updated_at,
            prefix,
            messages: self.checkpoint.transcript.len(),
            tool_calls: self.checkpoint.tool_calls.len() + self.prefix_records().len(),
            usage: self.checkpoint.usage.len(),
        }
    }

    /// The lengths of the state the log starts from: the checkpoint's, with the prefix a
    /// fork shares with its parent.
    pub(crate) fn start_counts(&self) -> super::Counts {
        let start = self.start();
        super::Counts {
            messages: start.prefix + start.messages,
            tool_calls: start.tool_calls,
            usage: start.usage,
        }
    }

    /// Attaches the parent's state whose first messages a fork's checkpoint shares.
    pub(crate) fn set_prefix(&mut self, parent: SessionSnapshot) {
        self.prefix = Some(parent);
    }

    fn prefix_len(&self) -> usize {
        match (&self.prefix, &self.checkpoint.lineage) {
            (Some(_), Some(lineage)) => lineage.fork_point,
            _ => 0,
        }
    }

    fn prefix_records(&self) -> &[super::ToolCallRecord] {
        let cut = self.prefix_len();
        self.prefix.as_ref().map_or(&[], |parent| {
            let end = parent
                .tool_calls
                .iter()
                .position(|r| r.call_at.message >= cut)
                .unwrap_or(parent.tool_calls.len());
            &parent.tool_calls[..end]
        })
    }

    /// The checkpoint, the lengths of the state it starts (the shared prefix included)
    /// and every entry, decoded: for rewriting the log elsewhere.
    pub(crate) fn into_entries(self) -> Result<(SessionSnapshot, super::Counts, Vec<LogEntry>)> {
        let counts = self.start_counts();
        let mut entries = Vec::with_capacity(self.heads.len());
        for (head, body) in self.heads.into_iter().zip(self.bodies) {
            let body = match body {
                Body::Decoded(body) => body,
                Body::Bytes(bytes) => decode_body(bytes)?,
            };
            check_body(&head, &body)?;
            entries.push(LogEntry { head, body });
        }
        Ok((self.checkpoint, counts, entries))
    }

    /// The first revision the log holds, and the lengths of the state at it and at every
    /// later one, from the heads alone.
    pub(crate) fn revision_index(&self) -> (Revision, Vec<super::Counts>) {
        let mut counts = Vec::with_capacity(self.heads.len() + 1);
        counts.push(self.start_counts());
        counts.extend(self.heads.iter().map(|head| head.state));
        (self.checkpoint.revision, counts)
    }

    /// [`into_entries`](Self::into_entries), once the state they make is checked to load:
    /// a log written again elsewhere must not carry damage along.
    ///
    /// # Errors
    ///
    /// As [`into_entries`](Self::into_entries) and [`state_at`](Self::state_at).
    pub(crate) fn into_checked_entries(
        self,
    ) -> Result<(SessionSnapshot, super::Counts, Vec<LogEntry>)> {
        let prefix = self.prefix.clone();
        let (checkpoint, counts, entries) = self.into_entries()?;
        let mut check = LogSource::new(checkpoint.clone());
        check.prefix = prefix;
        for entry in &entries {
            check.push(entry.clone());
        }
        check.state_at(None)?;
        Ok((checkpoint, counts, entries))
    }

    /// The revisions the log holds, oldest first.
    pub(crate) fn revisions(&self) -> Result<Vec<RevisionInfo>> {
        let folded = fold::fold(
            &self.checkpoint.id,
            self.start(),
            &self.heads,
            None,
            Track {
                steps: true,
                departures: false,
            },
        )?;
        Ok(folded
            .steps
            .into_iter()
            .map(|step| RevisionInfo {
                revision: step.revision,
                updated_at: step.updated_at,
                kind: step.kind,
                messages: step.view_len,
                restored_from: step.restored,
            })
            .collect())
    }

    /// The session at `until` (the head with `None`), validated.
    pub(crate) fn state_at(self, until: Option<Revision>) -> Result<SessionSnapshot> {
        // A log of its checkpoint alone (a session saved once, or by a release before the
        // log): the checkpoint is the state, and nothing is reworked.
        if self.heads.is_empty() && self.prefix.is_none() {
            let mut snapshot = self.checkpoint;
            if until.is_some_and(|r| r != snapshot.revision) {
                return Err(Error::RevisionNotFound {
                    id: snapshot.id.clone(),
                    revision: until.unwrap_or(snapshot.revision),
                    oldest: snapshot.revision,
                    newest: snapshot.revision,
                });
            }
            snapshot.validate()?;
            snapshot.history = HistoryStats {
                oldest_revision: snapshot.revision,
                ..HistoryStats::default()
            };
            return Ok(snapshot);
        }
        let folded = fold::fold(
            &self.checkpoint.id,
            self.start(),
            &self.heads,
            until,
            Track::default(),
        )?;
        let needed = needed_bodies(&folded.view);
        let (mut parts, checkpoint, heads) = self.into_parts(&needed)?;
        let (transcript, records) = fold::materialize(&folded, &heads, &mut parts)?;
        assemble(&checkpoint, &heads, &folded, transcript, records)
    }

    /// The whole history, and the head state.
    pub(crate) fn history(self) -> Result<(History, SessionSnapshot)> {
        let folded = fold::fold(
            &self.checkpoint.id,
            self.start(),
            &self.heads,
            None,
            Track {
                steps: false,
                departures: true,
            },
        )?;
        let all: Vec<usize> = (0..self.heads.len()).collect();
        let (mut parts, checkpoint, heads) = self.into_parts(&all)?;
        // Counted before `materialize`, which may take the checkpoint's messages whole
        // (a view that starts with all of them) and leave its stash empty.
        let lens = (parts.prefix.len(), parts.checkpoint.len());
        let (transcript, records) = fold::materialize(&folded, &heads, &mut parts)?;
        let mut in_view: HashMap<Ref, usize> = folded
            .view
            .iter()
            .enumerate()
            .map(|(index, at)| (*at, index))
            .collect();
        let mut viewed: Vec<Option<Message>> = transcript.iter().cloned().map(Some).collect();
        let mut messages = Vec::new();
        let mut collect = |source: Source, stored: &mut Stash, len: usize, added_at| {
            for index in 0..len {
                let at = Ref::new(source, index);
                let (message, standing) = if let Some(view_index) = in_view.remove(&at) {
                    (
                        viewed[view_index].take(),
                        Standing::InView { index: view_index },
                    )
                } else {
                    let (revision, by) = folded
                        .departures
                        .get(&at)
                        .copied()
                        .unwrap_or((folded.revision, EntryKind::Edit));
                    (stored.take(index), Standing::removed(revision, by))
                };
                if let Some(message) = message {
                    messages.push(HistoryMessage {
                        message,
                        added_at,
                        standing,
                    });
                }
            }
        };
        let oldest = checkpoint.revision;
        collect(Source::Prefix, &mut parts.prefix, lens.0, oldest);
        collect(Source::Checkpoint, &mut parts.checkpoint, lens.1, oldest);
        for (k, body) in parts.bodies.iter_mut().enumerate() {
            if let Some(body) = body {
                let len = body.messages.len();
                collect(Source::Entry(k), &mut body.messages, len, heads[k].revision);
            }
        }
        let head = assemble(&checkpoint, &heads, &folded, transcript, records)?;
        let history = History {
            id: head.id.clone(),
            revision: head.revision,
            oldest_revision: oldest,
            messages,
        };
        Ok((history, head))
    }

    /// Splits the log into the stored parts (with the `needed` bodies decoded), the
    /// checkpoint, and the heads.
    fn into_parts(self, needed: &[usize]) -> Result<(Parts, SessionSnapshot, Vec<EntryHead>)> {
        let cut = self.prefix_len();
        let prefix_records = self.prefix_records().to_vec();
        let LogSource {
            mut checkpoint,
            prefix,
            heads,
            bodies,
        } = self;
        let mut decoded: Vec<Option<DecodedBody>> = Vec::with_capacity(bodies.len());
        let mut to_decode: Vec<(usize, &[u8])> = Vec::new();
        let mut wanted = needed.iter().peekable();
        for (k, body) in bodies.into_iter().enumerate() {
            let is_needed = wanted.next_if(|&&n| n == k).is_some();
            match body {
                Body::Decoded(body) if is_needed => {
                    check_body(&heads[k], &body)?;
                    decoded.push(Some(body.into()));
                }
                Body::Bytes(bytes) if is_needed => {
                    to_decode.push((k, bytes));
                    decoded.push(None);
                }
                _ => decoded.push(None),
            }
        }
        for (k, body) in decode_bodies(&to_decode)? {
            check_body(&heads[k], &body)?;
            decoded[k] = Some(body.into());
        }
        let prefix_messages = match prefix {
            Some(parent) => {
                let mut transcript = Arc::unwrap_or_clone(parent.transcript);
                transcript.truncate(cut);
                transcript
            }
            None => Vec::new(),
        };
        let own = std::mem::take(Arc::make_mut(&mut checkpoint.transcript));
        let checkpoint_records = std::mem::take(Arc::make_mut(&mut checkpoint.tool_calls));
        let parts = Parts {
            prefix: Stash::new(prefix_messages),
            prefix_records,
            checkpoint: Stash::new(own),
            checkpoint_records,
            bodies: decoded,
        };
        Ok((parts, checkpoint, heads))
    }
}

/// Decodes bodies, on every core when there is much to decode: each body is its own JSON
/// document, so they parse independently.
fn decode_bodies(bodies: &[(usize, &[u8])]) -> Result<Vec<(usize, EntryBody)>> {
    let total: usize = bodies.iter().map(|(_, b)| b.len()).sum();
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let decode = |chunk: &[(usize, &[u8])]| -> Result<Vec<(usize, EntryBody)>> {
        chunk
            .iter()
            .map(|(k, bytes)| decode_body(bytes).map(|body| (*k, body)))
            .collect()
    };
    if threads < 2 || bodies.len() < 2 || total < PARALLEL_BODY_BYTES {
        return decode(bodies);
    }
    // Chunks of about equal bytes, one per thread.
    let share = total.div_ceil(threads);
    let mut chunks: Vec<&[(usize, &[u8])]> = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, (_, body)) in bodies.iter().enumerate() {
        bytes += body.len();
        if bytes >= share {
            chunks.push(&bodies[from..=i]);
            from = i + 1;
            bytes = 0;
        }
    }
    if from < bodies.len() {
        chunks.push(&bodies[from..]);
    }
    let results: Vec<Result<Vec<(usize, EntryBody)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .skip(1)
            .map(|chunk| scope.spawn(move || decode(chunk)))
            .collect();
        let mut results = vec![decode(chunks[0])];
        for handle in handles {
            results.push(handle.join().unwrap_or_else(|_| {
                Err(Error::inconsistent(
                    "decoding a log entry's messages panicked",
                ))
            }));
        }
        results
    });
    let mut out = Vec::with_capacity(bodies.len());
    for result in results {
        out.extend(result?);
    }
    Ok(out)
}

/// The snapshot of a folded state: the checkpoint's identity, the state's options,
/// metadata and usage, and the view's messages and records. Validated.
fn assemble(
    checkpoint: &SessionSnapshot,
    heads: &[EntryHead],
    folded: &Folded,
    transcript: Vec<Message>,
    records: Vec<super::ToolCallRecord>,
) -> Result<SessionSnapshot> {
    let missing = |what: &str| {
        Error::inconsistent(format!(
            "the log's state at revision {} takes its {what} from an entry that has none",
            folded.revision
        ))
    };
    let options = match folded.options {
        None => checkpoint.options.clone(),
        Some(k) => heads[k].options.clone().ok_or_else(|| missing("options"))?,
    };
    let metadata = match folded.metadata {
        None => checkpoint.metadata.clone(),
        Some(k) => heads[k]
            .metadata
            .clone()
            .ok_or_else(|| missing("metadata"))?,
    };
    let usage: Vec<Usage> = folded
        .usage
        .iter()
        .map(|&(source, i)| {
            match source {
                None => checkpoint.usage.get(i),
                Some(k) => heads.get(k).and_then(|h| h.usage.get(i)),
            }
            .cloned()
            .ok_or_else(|| missing("usage"))
        })
        .collect::<Result<_>>()?;
    let mut snapshot = SessionSnapshot::from_decoded(
        checkpoint.id.clone(),
        folded.revision,
        (checkpoint.created_at, folded.updated_at),
        options,
        metadata,
        checkpoint.lineage.clone(),
        (transcript, records, usage),
    );
    snapshot.history = HistoryStats {
        oldest_revision: checkpoint.revision,
        rewinds: folded.counters.rewinds,
        compactions: folded.counters.compactions,
        restores: folded.counters.restores,
    };
    snapshot.share = checkpoint.share;
    snapshot.validate()?;
    Ok(snapshot)
}

/// A session's log held in memory: a checkpoint and the entries after it, from which any
/// revision the log holds, the list of revisions and the whole history are worked out.
///
/// The crate's stores keep their logs themselves. A custom
/// [`SessionStore`](crate::SessionStore) that wants history keeps a checkpoint (a whole
/// snapshot, [`SessionSnapshot::to_json`]) and the bytes of each entry its saves add
/// ([`SessionSnapshot::pending_entry`], [`LogEntry::to_bytes`]), and rebuilds from them
/// with this type in `load`, `load_at`, `revisions` and `history`.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, Message, RewindTo, SessionId, SessionLog,
///     SessionSnapshot, Revision};
///
/// let first = SessionSnapshot::builder(SessionId::parse("s")?, "m")
///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
///     .build()?
///     .stored_at(Revision::from_u64(1));
/// let mut log = SessionLog::new(first.clone());
/// let mut rewound = first.clone();
/// rewound.rewind(RewindTo::LastTurns(1))?;
/// log.push(rewound.pending_entry().expect("derives from revision 1"))?;
///
/// assert!(log.head()?.transcript().is_empty());
/// assert_eq!(log.at(Revision::from_u64(1))?.transcript(), first.transcript());
/// assert_eq!(log.revisions()?.len(), 2);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SessionLog {
    pub(super) checkpoint: SessionSnapshot,
    pub(super) entries: Vec<LogEntry>,
}

impl SessionLog {
    /// A log that starts at `checkpoint`: the session as it was first saved (or as a
    /// retention policy left it), at its revision.
    #[must_use]
    pub fn new(checkpoint: SessionSnapshot) -> Self {
        SessionLog {
            checkpoint,
            entries: Vec::new(),
        }
    }

    /// Appends the entry of the next revision.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if it does not store the revision after the last one.
    pub fn push(&mut self, entry: LogEntry) -> Result<()> {
        let last = self
            .entries
            .last()
            .map_or(self.checkpoint.revision, LogEntry::revision);
        if entry.revision() != last.next() {
            return Err(Error::inconsistent(format!(
                "an entry of revision {} cannot follow revision {last}",
                entry.revision()
            )));
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The last revision the log holds.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.entries
            .last()
            .map_or(self.checkpoint.revision, LogEntry::revision)
    }

    pub(super) fn source(&self) -> LogSource<'static> {
        let mut source = LogSource::new(self.checkpoint.unshared());
        for entry in &self.entries {
            source.push(entry.clone());
        }
        source
    }

    /// The session at its last revision, marked as stored at it.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the entries do not make a valid session.
    pub fn head(&self) -> Result<SessionSnapshot> {
        let mut head = self.source().state_at(None)?;
        let revision = head.revision;
        head.mark_stored(revision);
        Ok(head)
    }

    /// The session exactly as it was at `revision`.
    ///
    /// # Errors
    ///
    /// [`Error::RevisionNotFound`] if the log does not hold it; [`Error::Inconsistent`] if
    /// the entries do not make a valid session.
    pub fn at(&self, revision: Revision) -> Result<SessionSnapshot> {
        self.source().state_at(Some(revision))
    }

    /// Every revision the log holds, oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the entries contradict each other.
    pub fn revisions(&self) -> Result<Vec<RevisionInfo>> {
        self.source().revisions()
    }

    /// Every message the log holds, with where it stands at the last revision.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the entries do not make a valid session.
    pub fn history(&self) -> Result<History> {
        self.source().history().map(|(history, _)| history)
    }
}
