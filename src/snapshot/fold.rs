//! Working out a revision of a session from its log: the checkpoint it starts from and
//! the entries after it ([`LogEntry`](super::LogEntry)).
//!
//! The fold reads only the entries' heads. It tracks each view as a list of *references*
//! (which stored message goes where), never the messages themselves, so going back to
//! an earlier view (a restore) copies references, and the messages a view needs are
//! decoded only once the view is known: bodies whose messages it does not hold (what
//! was compacted or rewound away) are never parsed.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::entry::{EntryBody, EntryHead, EntryKind};
use super::validate::pair_tool_calls;
use super::{Counts, ToolCallRecord, ToolCallStatus};
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::transcript::Message;

/// Where a stored message is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// The parent's view a fork shares (its first messages).
    Prefix,
    /// The checkpoint's own transcript.
    Checkpoint,
    /// The body of the entry at this index (0 for the first entry after the checkpoint).
    Entry(usize),
}

/// One stored message: where it is kept and its index there, in 8 bytes (a view of a
/// million messages is a million of these while it is worked out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ref {
    /// [`Source::Prefix`] is `u32::MAX`, [`Source::Checkpoint`] `u32::MAX - 1`, an entry
    /// its index.
    tag: u32,
    index: u32,
}

impl Ref {
    /// The message at `index` of `source`. Indices and entry numbers are bounded by what
    /// a store reads (a few hundred MiB, at least a few bytes a message or an entry), far
    /// below `u32::MAX`; past it they saturate, and the message is then found missing.
    pub(crate) fn new(source: Source, index: usize) -> Ref {
        let tag = match source {
            Source::Prefix => u32::MAX,
            Source::Checkpoint => u32::MAX - 1,
            Source::Entry(k) => u32::try_from(k).unwrap_or(u32::MAX - 2).min(u32::MAX - 2),
        };
        Ref {
            tag,
            index: u32::try_from(index).unwrap_or(u32::MAX),
        }
    }

    pub(crate) fn source(self) -> Source {
        match self.tag {
            u32::MAX => Source::Prefix,
            t if t == u32::MAX - 1 => Source::Checkpoint,
            k => Source::Entry(k as usize),
        }
    }

    pub(crate) fn index(self) -> usize {
        self.index as usize
    }
}

/// What the fold needs to know of the checkpoint a log starts from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    /// Messages of a parent's view shared by a fork, before the checkpoint's own.
    pub(crate) prefix: usize,
    /// The checkpoint's own messages.
    pub(crate) messages: usize,
    /// Its tool-call records (the prefix's included).
    pub(crate) tool_calls: usize,
    /// Its usage entries.
    pub(crate) usage: usize,
}

/// Where the options or the metadata of a state were last set: the checkpoint (`None`) or
/// the entry at an index.
pub(crate) type SetBy = Option<usize>;

/// A usage entry of a state: the checkpoint's (`None`) or an entry's, and its index there.
pub(crate) type UsageRef = (Option<usize>, usize);

/// The parts of a state that a restore brings back.
#[derive(Debug, Clone)]
struct Restorable {
    view: Vec<Ref>,
    options: SetBy,
    metadata: SetBy,
}

/// One revision the log holds, from its head: what [`RevisionInfo`](crate::RevisionInfo)
/// reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) kind: EntryKind,
    pub(crate) view_len: usize,
    pub(crate) restored: Option<Revision>,
}

/// How many entries of each kind that edits history a log holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) rewinds: u64,
    pub(crate) compactions: u64,
    pub(crate) restores: u64,
}

/// The state of one revision, as references into the stored parts.
#[derive(Debug, Clone)]
pub(crate) struct Folded {
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) view: Vec<Ref>,
    pub(crate) options: SetBy,
    pub(crate) metadata: SetBy,
    pub(crate) usage: Vec<UsageRef>,
    /// The lengths the last head says the state has.
    pub(crate) state: Counts,
    /// For each entry applied, how many messages of its base view it kept: a record's
    /// position in the view the entry made tells which of its messages holds the result.
    pub(crate) kept: Vec<usize>,
    pub(crate) counters: Counters,
    /// Every revision from the checkpoint to this one, when asked for.
    pub(crate) steps: Vec<Step>,
    /// For each message that left a view, the revision and kind of the entry it left by
    /// last, when asked for.
    pub(crate) departures: HashMap<Ref, (Revision, EntryKind)>,
}

/// What to work out besides the state.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Track {
    pub(crate) steps: bool,
    pub(crate) departures: bool,
}

/// The state at `until` (the last entry's revision with `None`) of the log that starts at
/// `start` and continues with `heads` (revisions one after another).
///
/// # Errors
///
/// [`Error::NotFound`]-kind [`Error::RevisionNotFound`] if `until` is not in the log;
/// [`Error::Inconsistent`] if an entry does not follow the one before it, keeps more
/// than its base has, starts from a revision the log does not hold, or says it has other
/// lengths than it makes.
pub(crate) fn fold(
    id: &SessionId,
    start: Start,
    heads: &[EntryHead],
    until: Option<Revision>,
    track: Track,
) -> Result<Folded> {
    let last = check_sequence(start.revision, heads)?;
    let until = until.unwrap_or(last);
    if until < start.revision || until > last {
        return Err(Error::RevisionNotFound {
            id: id.clone(),
            revision: until,
            oldest: start.revision,
            newest: last,
        });
    }
    let mut folding = Folding::new(start, heads, until, track);
    for (k, head) in heads.iter().enumerate() {
        if folding.folded.revision == until {
            break;
        }
        folding.apply(k, head, start.revision)?;
    }
    let mut folded = folding.folded;
    folded.view = folding.view;
    Ok(folded)
}

/// The last revision of a log that starts at `first` and continues with `heads`, once
/// every entry is checked to follow the one before it (also past what is asked for: a log
/// that breaks its sequence anywhere cannot be trusted anywhere).
///
/// # Errors
///
/// [`Error::Inconsistent`] for an entry out of sequence.
fn check_sequence(first: Revision, heads: &[EntryHead]) -> Result<Revision> {
    let mut last = first;
    for head in heads {
        if head.revision != last.next() || last.as_u64() == u64::MAX {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} follows revision {last}; entries must count up by one",
                head.revision
            )));
        }
        last = head.revision;
    }
    Ok(last)
}

/// A fold in progress: the current view, the state so far, and the states kept for the
/// restores still to come.
struct Folding {
    view: Vec<Ref>,
    folded: Folded,
    /// The revisions some entry up to the target restores: their states are kept as the
    /// fold passes them.
    wanted: HashSet<Revision>,
    saved: HashMap<Revision, Restorable>,
    track: Track,
}

impl Folding {
    fn new(start: Start, heads: &[EntryHead], until: Revision, track: Track) -> Self {
        let view: Vec<Ref> = (0..start.prefix)
            .map(|index| Ref::new(Source::Prefix, index))
            .chain((0..start.messages).map(|index| Ref::new(Source::Checkpoint, index)))
            .collect();
        let mut folding = Folding {
            wanted: heads
                .iter()
                .take_while(|h| h.revision <= until)
                .filter_map(|h| h.base)
                .collect(),
            saved: HashMap::new(),
            folded: Folded {
                revision: start.revision,
                updated_at: start.updated_at,
                view: Vec::new(),
                options: None,
                metadata: None,
                usage: (0..start.usage).map(|i| (None, i)).collect(),
                state: Counts {
                    messages: view.len(),
                    tool_calls: start.tool_calls,
                    usage: start.usage,
                },
                kept: Vec::new(),
                counters: Counters::default(),
                steps: Vec::new(),
                departures: HashMap::new(),
            },
            view,
            track,
        };
        folding.passed(EntryKind::Checkpoint, None);
        folding
    }

    /// Records the revision just reached: its step, and its state if a restore needs it.
    fn passed(&mut self, kind: EntryKind, restored: Option<Revision>) {
        let folded = &mut self.folded;
        if self.track.steps {
            folded.steps.push(Step {
                revision: folded.revision,
                updated_at: folded.updated_at,
                kind,
                view_len: self.view.len(),
                restored,
            });
        }
        if self.wanted.contains(&folded.revision) {
            self.saved.insert(
                folded.revision,
                Restorable {
                    view: self.view.clone(),
                    options: folded.options,
                    metadata: folded.metadata,
                },
            );
        }
    }

    /// Applies entry `k` (its head), checking it against the state it starts from.
    fn apply(&mut self, k: usize, head: &EntryHead, first: Revision) -> Result<()> {
        let restored = match head.base {
            None => None,
            Some(base) => Some(self.saved.get(&base).cloned().ok_or_else(|| {
                Error::inconsistent(format!(
                    "the log entry of revision {} goes back to revision {base}, which the log does not hold (it starts at revision {first})",
                    head.revision
                ))
            })?),
        };
        let kept = self.apply_view(k, head, restored.as_ref().map(|r| &r.view[..]))?;
        let folded = &mut self.folded;
        if let Some(restored) = &restored {
            folded.options = restored.options;
            folded.metadata = restored.metadata;
        }
        if head.options.is_some() {
            folded.options = Some(k);
        }
        if head.metadata.is_some() {
            folded.metadata = Some(k);
        }
        if let Some(usage_kept) = head.usage_kept {
            if usage_kept > folded.usage.len() {
                return Err(Error::inconsistent(format!(
                    "the log entry of revision {} keeps {usage_kept} usage entries of {}",
                    head.revision,
                    folded.usage.len()
                )));
            }
            folded.usage.truncate(usage_kept);
        }
        folded
            .usage
            .extend((0..head.usage.len()).map(|i| (Some(k), i)));
        if head.state.messages != self.view.len() || head.state.usage != folded.usage.len() {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} says the session then has {} messages and {} usage entries, but it makes {} and {}",
                head.revision,
                head.state.messages,
                head.state.usage,
                self.view.len(),
                folded.usage.len()
            )));
        }
        folded.kept.push(kept);
        folded.state = head.state;
        folded.revision = head.revision;
        folded.updated_at = head.updated_at;
        match head.kind {
            EntryKind::Rewind => folded.counters.rewinds += 1,
            EntryKind::Compaction => folded.counters.compactions += 1,
            EntryKind::Restore => folded.counters.restores += 1,
            _ => {}
        }
        self.passed(head.kind, head.base);
        Ok(())
    }

    /// Makes the view entry `k` makes from its base (`restored`, or the current view), and
    /// returns how many messages of the base it kept.
    fn apply_view(
        &mut self,
        k: usize,
        head: &EntryHead,
        restored: Option<&[Ref]>,
    ) -> Result<usize> {
        let base_view: &[Ref] = restored.unwrap_or(&self.view);
        let (keep_start, keep_end) = head.keep.unwrap_or((0, base_view.len()));
        if keep_end > base_view.len() {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} keeps messages {keep_start} to {keep_end} of a view of {}",
                head.revision,
                base_view.len()
            )));
        }
        let body = |range: std::ops::Range<usize>| {
            range.map(move |index| Ref::new(Source::Entry(k), index))
        };
        // A turn keeps the whole view and appends: the view grows in place.
        if restored.is_none() && keep_start == 0 && head.prepend == 0 && keep_end == self.view.len()
        {
            self.view.extend(body(0..head.messages));
            return Ok(keep_end);
        }
        let next: Vec<Ref> = body(0..head.prepend)
            .chain(base_view[keep_start..keep_end].iter().copied())
            .chain(body(head.prepend..head.messages))
            .collect();
        if self.track.departures {
            let after: HashSet<Ref> = next.iter().copied().collect();
            for gone in self.view.iter().filter(|r| !after.contains(r)) {
                self.folded
                    .departures
                    .insert(*gone, (head.revision, head.kind));
            }
            // A message back in the view (a restore) is no longer gone.
            for back in &after {
                self.folded.departures.remove(back);
            }
        }
        self.view = next;
        Ok(keep_end - keep_start)
    }
}

/// The stored messages and records a view is made from, each message taken out once.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub(crate) prefix: Stash,
    pub(crate) prefix_records: Vec<ToolCallRecord>,
    pub(crate) checkpoint: Stash,
    pub(crate) checkpoint_records: Vec<ToolCallRecord>,
    /// The decoded bodies, by entry index (`None` where not needed or not decoded).
    pub(crate) bodies: Vec<Option<DecodedBody>>,
}

/// Stored messages to be taken out one at a time, each at most once; kept as the vector
/// they were decoded into (no copy), so a view that holds them all in order takes the
/// vector itself.
#[derive(Debug, Default)]
pub(crate) struct Stash {
    messages: Vec<Message>,
    taken: Vec<bool>,
    any_taken: bool,
}

impl Stash {
    pub(crate) fn new(messages: Vec<Message>) -> Self {
        Stash {
            taken: vec![false; messages.len()],
            messages,
            any_taken: false,
        }
    }

    /// How many messages were stored, taken out or not (`take_all` empties the vector).
    pub(crate) fn len(&self) -> usize {
        self.taken.len()
    }

    /// Message `i`, unless it was taken already (or there is none).
    pub(crate) fn take(&mut self, i: usize) -> Option<Message> {
        let taken = self.taken.get_mut(i)?;
        if std::mem::replace(taken, true) {
            return None;
        }
        self.any_taken = true;
        // An empty message allocates nothing.
        Some(std::mem::replace(
            &mut self.messages[i],
            Message::new(crate::transcript::Role::User, Vec::new()),
        ))
    }

    /// Every message, in order, if none was taken yet.
    fn take_all(&mut self) -> Option<Vec<Message>> {
        if self.any_taken {
            return None;
        }
        self.any_taken = true;
        self.taken.iter_mut().for_each(|t| *t = true);
        Some(std::mem::take(&mut self.messages))
    }
}

/// A decoded body, its messages to be taken out.
#[derive(Debug)]
pub(crate) struct DecodedBody {
    pub(crate) messages: Stash,
    pub(crate) tool_calls: Vec<ToolCallRecord>,
}

impl From<EntryBody> for DecodedBody {
    fn from(body: EntryBody) -> Self {
        DecodedBody {
            messages: Stash::new(body.messages),
            tool_calls: body.tool_calls,
        }
    }
}

/// The entries whose bodies hold messages of `view`, in order.
pub(crate) fn needed_bodies(view: &[Ref]) -> Vec<usize> {
    let mut needed: Vec<usize> = view
        .iter()
        .filter_map(|r| match r.source() {
            Source::Entry(k) => Some(k),
            _ => None,
        })
        .collect();
    needed.sort_unstable();
    needed.dedup();
    needed
}

impl Parts {
    /// The message `at` refers to, taken out of the parts (a view holds each stored
    /// message at most once).
    pub(crate) fn take(&mut self, at: Ref) -> Result<Message> {
        let stash = match at.source() {
            Source::Prefix => Some(&mut self.prefix),
            Source::Checkpoint => Some(&mut self.checkpoint),
            Source::Entry(k) => self
                .bodies
                .get_mut(k)
                .and_then(Option::as_mut)
                .map(|body| &mut body.messages),
        };
        stash
            .and_then(|stash| stash.take(at.index()))
            .ok_or_else(|| {
                Error::inconsistent(format!(
                    "the log's view refers to a message it does not hold ({at:?})"
                ))
            })
    }

    /// The results closed as interrupted, by where they are stored and their block: the
    /// one status a view's tool calls cannot be told from the messages alone.
    fn interrupted(&self, heads: &[EntryHead], folded: &Folded) -> Result<HashSet<(Ref, usize)>> {
        let mut interrupted = HashSet::new();
        let prefix = self.prefix.len();
        let mut mark = |records: &[ToolCallRecord], locate: &dyn Fn(usize) -> Option<Ref>| {
            for record in records {
                if record.status != ToolCallStatus::Interrupted {
                    continue;
                }
                let at = locate(record.result_at.message).ok_or_else(|| {
                    Error::inconsistent(format!(
                        "the record of tool call {:?} puts its result at message {}, which the part holding the record does not store",
                        record.call_id, record.result_at.message
                    ))
                })?;
                interrupted.insert((at, record.result_at.block));
            }
            Ok::<(), Error>(())
        };
        mark(&self.prefix_records, &|m| Some(Ref::new(Source::Prefix, m)))?;
        mark(&self.checkpoint_records, &|m| {
            Some(if m < prefix {
                Ref::new(Source::Prefix, m)
            } else {
                Ref::new(Source::Checkpoint, m - prefix)
            })
        })?;
        for (k, body) in self.bodies.iter().enumerate() {
            let Some(body) = body else { continue };
            let (Some(head), Some(&kept)) = (heads.get(k), folded.kept.get(k)) else {
                continue;
            };
            let prepend = head.prepend;
            mark(&body.tool_calls, &|m| {
                let index = if m < prepend {
                    m
                } else if m >= prepend + kept {
                    m - kept
                } else {
                    return None;
                };
                Some(Ref::new(Source::Entry(k), index))
            })?;
        }
        Ok(interrupted)
    }
}

/// The transcript and tool-call records of `folded`'s view, taking its messages out of
/// `parts` (whose bodies must include every [`needed_bodies`] of the view).
///
/// # Errors
///
/// [`Error::Inconsistent`] if a message is missing, the tool calls do not pair, or the
/// number of records differs from what the last head says.
pub(crate) fn materialize(
    folded: &Folded,
    heads: &[EntryHead],
    parts: &mut Parts,
) -> Result<(Vec<Message>, Vec<ToolCallRecord>)> {
    let interrupted = parts.interrupted(heads, folded)?;
    // A view that starts with the whole checkpoint, in order (a session that only ever
    // grew), takes the checkpoint's vector as it was decoded, without a copy.
    let checkpoint_len = parts.checkpoint.len();
    let starts_with_checkpoint = parts.prefix.len() == 0
        && folded.view.len() >= checkpoint_len
        && folded.view[..checkpoint_len]
            .iter()
            .enumerate()
            .all(|(i, at)| *at == Ref::new(Source::Checkpoint, i));
    let (mut transcript, rest) = match parts.checkpoint.take_all() {
        Some(mut whole) if starts_with_checkpoint => {
            whole.reserve(folded.view.len() - checkpoint_len);
            (whole, &folded.view[checkpoint_len..])
        }
        Some(whole) => {
            parts.checkpoint = Stash::new(whole);
            (Vec::with_capacity(folded.view.len()), &folded.view[..])
        }
        None => (Vec::with_capacity(folded.view.len()), &folded.view[..]),
    };
    for at in rest {
        transcript.push(parts.take(*at)?);
    }
    let records: Vec<ToolCallRecord> = pair_tool_calls(&transcript)?
        .into_iter()
        .map(|pair| ToolCallRecord {
            call_id: pair.call.id.clone(),
            tool_name: pair.call.name.clone(),
            call_at: pair.call_at,
            result_at: pair.result_at,
            status: if !pair.result.is_error {
                ToolCallStatus::Ok
            } else if interrupted
                .contains(&(folded.view[pair.result_at.message], pair.result_at.block))
            {
                ToolCallStatus::Interrupted
            } else {
                ToolCallStatus::Error
            },
        })
        .collect();
    if records.len() != folded.state.tool_calls {
        return Err(Error::inconsistent(format!(
            "the log says revision {} has {} tool calls, but its view has {}",
            folded.revision,
            folded.state.tool_calls,
            records.len()
        )));
    }
    Ok((transcript, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Usage;

    fn at(s: u64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + i64::try_from(s).unwrap(), 0).unwrap()
    }

    fn sid() -> SessionId {
        SessionId::parse("f").unwrap()
    }

    fn start(messages: usize) -> Start {
        Start {
            revision: Revision::from_u64(1),
            updated_at: at(1),
            prefix: 0,
            messages,
            tool_calls: 0,
            usage: 0,
        }
    }

    struct Log {
        heads: Vec<EntryHead>,
        len: usize,
        usage: usize,
    }

    impl Log {
        fn new(messages: usize) -> Self {
            Log {
                heads: Vec::new(),
                len: messages,
                usage: 0,
            }
        }

        fn push(
            &mut self,
            kind: EntryKind,
            base: Option<(u64, usize)>,
            keep: Option<(usize, usize)>,
            prepend: usize,
            messages: usize,
        ) {
            let revision = Revision::from_u64(2 + self.heads.len() as u64);
            let base_len = base.map_or(self.len, |(_, len)| len);
            let (s, e) = keep.unwrap_or((0, base_len));
            self.len = messages + (e - s);
            self.usage += 1;
            self.heads.push(EntryHead {
                revision,
                updated_at: at(revision.as_u64()),
                kind,
                base: base.map(|(r, _)| Revision::from_u64(r)),
                keep,
                prepend,
                messages,
                usage_kept: None,
                usage: vec![Usage::new("m")],
                options: None,
                metadata: None,
                state: Counts {
                    messages: self.len,
                    tool_calls: 0,
                    usage: self.usage,
                },
            });
        }
    }

    fn refs(view: &[Ref]) -> Vec<String> {
        view.iter()
            .map(|r| match r.source() {
                Source::Prefix => format!("p{}", r.index()),
                Source::Checkpoint => format!("c{}", r.index()),
                Source::Entry(k) => format!("e{k}.{}", r.index()),
            })
            .collect()
    }

    /// checkpoint [c0 c1] (rev 1); turn +2 (rev 2); rewind to 3 (rev 3); compaction of 2
    /// into one summary, then a message (rev 4); restore of rev 2 (rev 5).
    fn sample() -> Log {
        let mut log = Log::new(2);
        log.push(EntryKind::Turn, None, None, 0, 2);
        log.push(EntryKind::Rewind, None, Some((0, 3)), 0, 0);
        log.push(EntryKind::Compaction, None, Some((2, 3)), 1, 2);
        log.push(EntryKind::Restore, Some((2, 4)), None, 0, 0);
        log
    }

    #[test]
    fn each_revision_is_folded_from_the_heads() {
        let log = sample();
        let view = |r: u64| {
            refs(
                &fold(
                    &sid(),
                    start(2),
                    &log.heads,
                    Some(Revision::from_u64(r)),
                    Track::default(),
                )
                .unwrap()
                .view,
            )
        };
        assert_eq!(view(1), ["c0", "c1"]);
        assert_eq!(view(2), ["c0", "c1", "e0.0", "e0.1"]);
        assert_eq!(view(3), ["c0", "c1", "e0.0"]);
        assert_eq!(view(4), ["e2.0", "e0.0", "e2.1"]);
        assert_eq!(view(5), ["c0", "c1", "e0.0", "e0.1"]);
        let head = fold(&sid(), start(2), &log.heads, None, Track::default()).unwrap();
        assert_eq!(head.revision, Revision::from_u64(5));
        assert_eq!(head.usage.len(), 4, "usage is never taken back");
        assert_eq!(
            head.counters,
            Counters {
                rewinds: 1,
                compactions: 1,
                restores: 1
            }
        );
        assert_eq!(needed_bodies(&head.view), [0]);
    }

    #[test]
    fn steps_and_departures_say_what_happened_to_each_message() {
        let log = sample();
        let track = Track {
            steps: true,
            departures: true,
        };
        let four = fold(
            &sid(),
            start(2),
            &log.heads,
            Some(Revision::from_u64(4)),
            track,
        )
        .unwrap();
        let kinds: Vec<_> = four.steps.iter().map(|s| (s.kind, s.view_len)).collect();
        assert_eq!(
            kinds,
            [
                (EntryKind::Checkpoint, 2),
                (EntryKind::Turn, 4),
                (EntryKind::Rewind, 3),
                (EntryKind::Compaction, 3)
            ]
        );
        let gone = |f: &Folded, source, index| f.departures.get(&Ref::new(source, index)).copied();
        assert_eq!(
            gone(&four, Source::Entry(0), 1),
            Some((Revision::from_u64(3), EntryKind::Rewind))
        );
        assert_eq!(
            gone(&four, Source::Checkpoint, 0),
            Some((Revision::from_u64(4), EntryKind::Compaction))
        );
        let five = fold(&sid(), start(2), &log.heads, None, track).unwrap();
        assert_eq!(gone(&five, Source::Entry(0), 1), None, "restored");
        assert_eq!(
            gone(&five, Source::Entry(2), 0),
            Some((Revision::from_u64(5), EntryKind::Restore))
        );
        assert_eq!(five.steps[4].restored, Some(Revision::from_u64(2)));
    }

    #[test]
    fn logs_that_contradict_themselves_are_refused() {
        let log = sample();
        let err = fold(
            &sid(),
            start(2),
            &log.heads,
            Some(Revision::from_u64(9)),
            Track::default(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::RevisionNotFound { .. }), "{err}");
        let mut skipped = log.heads.clone();
        skipped.remove(1);
        assert!(fold(&sid(), start(2), &skipped, None, Track::default()).is_err());
        // A revision past the one asked for, out of sequence, is an error, not the end.
        let mut jumped = log.heads.clone();
        jumped[1].revision = Revision::from_u64(9);
        assert!(fold(&sid(), start(2), &jumped, None, Track::default()).is_err());
        let mut too_long = log.heads.clone();
        too_long[1].keep = Some((0, 9));
        assert!(fold(&sid(), start(2), &too_long, None, Track::default()).is_err());
        let mut wrong_state = log.heads.clone();
        wrong_state[0].state.messages = 3;
        assert!(fold(&sid(), start(2), &wrong_state, None, Track::default()).is_err());
        let mut unknown_base = log.heads.clone();
        unknown_base[3].base = Some(Revision::NEW);
        let err = fold(&sid(), start(2), &unknown_base, None, Track::default()).unwrap_err();
        assert!(err.to_string().contains("does not hold"), "{err}");
    }
}
