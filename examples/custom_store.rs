//! Keeping sessions in your own backend: implement [`SessionStore`], then check it with
//! the crate's store contract suite.
//!
//! ```sh
//! cargo run --example custom_store     # the demonstration, then the contract report
//! cargo test --example custom_store    # the contract suite as a test
//! ```
//!
//! The backend here is [`KeyValueService`], an in-process stand-in for a remote key-value
//! service (etcd, Consul, `DynamoDB`, Redis with a script, an object store with
//! conditional writes): keys map to bytes, every key has a version, and a write can be
//! made conditional on the version. That conditional write is what makes
//! [`SessionStore::save`] a correct compare-and-swap: two application instances that
//! resume the same session cannot overwrite each other's turns. The example shows the
//! second writer being refused with [`Error::Conflict`] and recovering by reloading.
//!
//! The rules a store must follow (see [`SessionStore`]):
//!
//! - `save` stores the snapshot at `snapshot.revision().next()` only if the stored revision
//!   is still `snapshot.revision()` ([`Revision::NEW`]: only if nothing is stored), and
//!   otherwise fails with [`Error::Conflict`] (built with [`Error::conflict`]), changing
//!   nothing;
//! - `load` returns the snapshot with its stored revision set, marked as the stored one
//!   ([`SessionSnapshot::stored_at`]), and refuses bytes filed under another id
//!   ([`check_stored_id`]);
//! - a failed call changes nothing.
//!
//! Four methods are required. This store also implements the optional storage primitives
//! the crate's own stores have: archiving (`set_archived`, `list_scoped`), a conditional
//! delete (`delete_if_unchanged`, checked with [`check_unchanged`] and made conditional on
//! the exact bytes it checked, so a prune never deletes a session saved or created again
//! after it was listed), and `stored_bytes`. Fork, prune,
//! export and import then come with every store through [`SessionStoreExt`]. Finally,
//! `agent_session::testing::contract` (the `testing` feature) runs the same cases against
//! it as against the crate's stores, and every one passes but the history cases, which
//! it skips and says so: this store keeps only the head (`load_at`, `revisions`, `history`
//! and `restore` are the trait's defaults; a store that keeps a log would rebuild them
//! with `SessionLog`).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_session::{
    check_stored_id, check_unchanged, testing, BoxError, Bundle, Completion, CompletionRequest,
    ContentBlock, Cost, Engine, Error, ForkAt, Harness, ImportIds, ListScope, Location, Message,
    PrunePolicy, Revision, Role, SessionId, SessionList, SessionOptions, SessionSnapshot,
    SessionStore, SessionStoreExt, SessionSummary, StoredVersion, Usage,
};

// ---------------------------------------------------------------------------------------
// The backend: a pretend key-value service.
// ---------------------------------------------------------------------------------------

/// A key-value service with versioned keys and conditional writes. The mutex stands for
/// the service's own atomicity; a client never holds a lock across calls.
#[derive(Debug, Default)]
struct KeyValueService {
    entries: Mutex<HashMap<String, Versioned>>,
}

#[derive(Debug, Clone)]
struct Versioned {
    /// Starts at 1 when the key is created and goes up by one on every write.
    version: u64,
    bytes: Vec<u8>,
}

impl KeyValueService {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Versioned>> {
        // Every change is a single insert or remove, so a poisoned map is still whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, key: &str) -> Option<Versioned> {
        self.entries().get(key).cloned()
    }

    /// Writes `bytes` under `key` if the key's version is `expected` (0: the key must not
    /// exist) and returns the new version; otherwise changes nothing and returns the
    /// current version (`None`: no such key).
    fn put_if_version(&self, key: &str, expected: u64, bytes: Vec<u8>) -> Result<u64, Option<u64>> {
        let mut entries = self.entries();
        let current = entries.get(key).map(|entry| entry.version);
        if current.unwrap_or(0) != expected {
            return Err(current);
        }
        let version = expected + 1;
        entries.insert(key.to_owned(), Versioned { version, bytes });
        Ok(version)
    }

    /// Writes `bytes` under `key` whatever its version.
    fn put(&self, key: &str, bytes: Vec<u8>) {
        let mut entries = self.entries();
        let version = entries.get(key).map_or(0, |entry| entry.version) + 1;
        entries.insert(key.to_owned(), Versioned { version, bytes });
    }

    fn delete(&self, key: &str) -> bool {
        self.entries().remove(key).is_some()
    }

    /// Deletes `key` if it holds exactly `expected` (version and bytes: a version alone
    /// starts over at 1 when a key is deleted and written again); otherwise changes nothing
    /// and returns the current version (`None`: no such key).
    fn delete_if_same(&self, key: &str, expected: &Versioned) -> Result<(), Option<u64>> {
        let mut entries = self.entries();
        match entries.get(key) {
            Some(entry) if entry.version == expected.version && entry.bytes == expected.bytes => {
                entries.remove(key);
                Ok(())
            }
            current => Err(current.map(|entry| entry.version)),
        }
    }

    /// Deletes `key` if it holds `bytes`.
    fn delete_if_bytes(&self, key: &str, bytes: &[u8]) {
        let mut entries = self.entries();
        if entries.get(key).is_some_and(|entry| entry.bytes == bytes) {
            entries.remove(key);
        }
    }

    fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .entries()
            .keys()
            .filter(|key| key.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        keys
    }
}

// ---------------------------------------------------------------------------------------
// The store: `SessionStore` over the service.
// ---------------------------------------------------------------------------------------

/// Sessions as `sessions/<id>` keys. The service's key version *is* the session's
/// revision, so the service's conditional write does the compare-and-swap.
///
/// An archived session has a second key, `archived/<id>`, whose value is the creation time
/// of the session it archives: the archive state lives beside the snapshot, so archiving
/// neither rewrites the session nor moves its revision. A marker counts only while it names
/// the stored session's creation time, and the first save of a new session removes any
/// marker under its id, so a marker left behind (a delete that stopped between its two
/// keys, or an archive racing a delete) does not archive a new session saved later under
/// the same id, not even the same session imported again.
#[derive(Debug, Clone)]
struct KvSessionStore {
    service: Arc<KeyValueService>,
}

const PREFIX: &str = "sessions/";
const ARCHIVED: &str = "archived/";

impl KvSessionStore {
    fn new(service: Arc<KeyValueService>) -> Self {
        KvSessionStore { service }
    }

    /// Session ids are `a-z 0-9 - _` only, so they are safe in any key or URL.
    fn key(id: &SessionId) -> String {
        format!("{PREFIX}{id}")
    }

    fn marker_key(id: &SessionId) -> String {
        format!("{ARCHIVED}{id}")
    }

    /// The marker's value for a session created at `snapshot.created_at()`.
    fn marker(snapshot: &SessionSnapshot) -> Vec<u8> {
        snapshot.created_at().to_rfc3339().into_bytes()
    }

    /// The session `id` that `entry` (under `key`) holds, as stored at its version.
    fn decode(
        id: &SessionId,
        key: &str,
        entry: &Versioned,
    ) -> agent_session::Result<SessionSnapshot> {
        // Strict decoding and full validation: damaged bytes are an error, never a
        // half-valid session. `at` names the key in the error and classifies it as
        // corrupt stored data.
        let location = Location::Stored(key.to_owned());
        let snapshot = SessionSnapshot::from_json(&entry.bytes).map_err(|e| e.at(&location))?;
        // Refuse bytes filed under the wrong key, as the file store refuses a renamed file.
        check_stored_id(id, snapshot.id(), &location)?;
        Ok(snapshot.stored_at(Revision::from_u64(entry.version)))
    }

    /// Whether the stored `snapshot` is archived: its marker names its creation time.
    fn is_archived(&self, snapshot: &SessionSnapshot) -> bool {
        self.service
            .get(&Self::marker_key(snapshot.id()))
            .is_some_and(|marker| marker.bytes == Self::marker(snapshot))
    }
}

impl SessionStore for KvSessionStore {
    fn save(&self, snapshot: &SessionSnapshot) -> agent_session::Result<Revision> {
        let expected = snapshot.revision();
        // A snapshot exactly as stored at its revision (loaded and saved again unchanged)
        // writes nothing and keeps its revision, so other holders of that revision meet no
        // conflict over a change that never happened. The snapshot only knows it came
        // unchanged from *a* store; the bytes tell that it is this one's.
        if snapshot.is_unchanged_since_stored() {
            if let Some(stored) = self.service.get(&Self::key(snapshot.id())) {
                if stored.version == expected.as_u64()
                    && stored.bytes == snapshot.to_json_with_revision(expected)?
                {
                    return Ok(expected);
                }
            }
        }
        let revision = expected.next();
        // Encode it as it will be stored, so the JSON's own `revision` field is right for
        // anyone reading the bytes directly. (`to_json` writes the snapshot's revision.)
        let bytes = snapshot.to_json_with_revision(revision)?;
        match self
            .service
            .put_if_version(&Self::key(snapshot.id()), expected.as_u64(), bytes)
        {
            Ok(version) => {
                if expected == Revision::NEW {
                    // A new session starts active. A marker left under its id (by a delete
                    // that stopped between its two keys) names the old session's creation
                    // time, which the new one has too when it is that session imported
                    // again: remove it. (An archive of the new session landing between the
                    // write above and this would be undone: a service with multi-key
                    // transactions would write both at once.)
                    self.service.delete(&Self::marker_key(snapshot.id()));
                }
                Ok(Revision::from_u64(version))
            }
            Err(current) => Err(Error::conflict(
                snapshot.id(),
                expected,
                current.map(Revision::from_u64),
            )),
        }
    }

    fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
        let key = Self::key(id);
        let entry = self
            .service
            .get(&key)
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        Self::decode(id, &key, &entry)
    }

    fn list(&self) -> agent_session::Result<SessionList> {
        self.list_scoped(ListScope::Active)
    }

    fn list_scoped(&self, scope: ListScope) -> agent_session::Result<SessionList> {
        let (mut sessions, mut unreadable) = (Vec::new(), Vec::new());
        for key in self.service.keys_with_prefix(PREFIX) {
            let name = key.strip_prefix(PREFIX).unwrap_or(&key);
            match SessionId::parse(name).and_then(|id| self.load(&id)) {
                Ok(snapshot) => {
                    let archived = self.is_archived(&snapshot);
                    if scope.includes(archived) {
                        let mut summary = SessionSummary::of(&snapshot);
                        summary.archived = archived;
                        sessions.push(summary);
                    }
                }
                // Deleted between listing the keys and reading one: just gone.
                Err(err) if err.is_not_found() => {}
                // One bad entry never hides the others.
                Err(err) => unreadable.push(err),
            }
        }
        // Sorts newest first, ties broken by id, as the built-in stores do.
        Ok(SessionList::new(sessions, unreadable))
    }

    fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
        if !self.service.delete(&Self::key(id)) {
            return Err(Error::NotFound { id: id.clone() });
        }
        // The session first, then its marker: stopping in between leaves a marker that
        // names a creation time no new session has.
        self.service.delete(&Self::marker_key(id));
        Ok(())
    }

    // Optional: without it the store cannot archive (the default is `Unsupported`).
    fn set_archived(&self, id: &SessionId, archived: bool) -> agent_session::Result<()> {
        let snapshot = self.load(id)?;
        let key = Self::marker_key(id);
        if archived {
            // Archiving an archived session writes the same marker again.
            self.service.put(&key, Self::marker(&snapshot));
        } else {
            self.service.delete(&key);
        }
        Ok(())
    }

    // Optional: the trait's default compares and deletes in two steps. The service's
    // conditional delete makes it one, so `prune` never deletes a session saved after it
    // was listed.
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> agent_session::Result<()> {
        let key = Self::key(&listed.id);
        let entry = self.service.get(&key);
        let stored = match &entry {
            Some(entry) => {
                let snapshot = Self::decode(&listed.id, &key, entry)?;
                Some((
                    StoredVersion {
                        revision: snapshot.revision(),
                        created_at: snapshot.created_at(),
                        archived: self.is_archived(&snapshot),
                    },
                    Self::marker(&snapshot),
                ))
            }
            None => None,
        };
        check_unchanged(listed, stored.as_ref().map(|(version, _)| *version))?;
        let (Some(entry), Some((_, marker))) = (entry, stored) else {
            return Err(Error::NotFound {
                id: listed.id.clone(),
            });
        };
        // The delete is conditional on exactly the bytes checked above, so a save, or a
        // delete and a new session under the same id, landing in between keeps the session.
        // The archive state is checked above only: an archive landing in between is the one
        // change this delete can miss (a service with multi-key transactions would check
        // both keys at once).
        self.service
            .delete_if_same(&key, &entry)
            .map_err(|current| match current {
                None => Error::NotFound {
                    id: listed.id.clone(),
                },
                Some(version) => Error::Changed {
                    id: listed.id.clone(),
                    change: format!("it was saved (or created again) at revision {version}"),
                },
            })?;
        // Only this session's marker: one a new session under the id wrote meanwhile stays.
        self.service
            .delete_if_bytes(&Self::marker_key(&listed.id), &marker);
        Ok(())
    }

    // Optional: sizes for `PrunePolicy::max_total_bytes` (the default measures the JSON).
    fn stored_bytes(&self, id: &SessionId) -> agent_session::Result<Option<u64>> {
        self.service
            .get(&Self::key(id))
            .map(|entry| Some(entry.bytes.len() as u64))
            .ok_or_else(|| Error::NotFound { id: id.clone() })
    }
}

// ---------------------------------------------------------------------------------------
// A stand-in model, so the example runs offline.
// ---------------------------------------------------------------------------------------

/// Takes notes: replies with how many notes the conversation holds, which it can only
/// know from the transcript it is given.
struct NoteTaker;

impl Engine for NoteTaker {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let notes: Vec<String> = request
            .transcript
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .collect();
        let reply = format!("Noted. Your notes: {}.", notes.join("; "));
        let input_tokens = 30 + 3 * u64::try_from(notes.len()).unwrap_or(u64::MAX);
        let usage = Usage::new(request.model)
            .with_tokens(input_tokens, 12)
            .with_cost(
                Cost::per_million_tokens(Cost::from_nano_usd(250_000_000), input_tokens)
                    + Cost::per_million_tokens(Cost::from_nano_usd(1_250_000_000), 12),
            );
        Ok(Completion::new(
            Message::assistant(vec![ContentBlock::text(reply)]),
            usage,
        ))
    }
}

// ---------------------------------------------------------------------------------------
// The demonstration.
// ---------------------------------------------------------------------------------------

// The demonstration reads top to bottom, one numbered section after another.
#[allow(clippy::too_many_lines)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn StdError>> {
    println!("agent-session: a custom SessionStore over a key-value service");
    println!("=============================================================");

    let service = Arc::new(KeyValueService::default());
    // Two application instances (think: two servers) sharing one service.
    let app_a = Harness::builder(KvSessionStore::new(Arc::clone(&service)), || NoteTaker).build();
    let app_b = Harness::builder(KvSessionStore::new(Arc::clone(&service)), || NoteTaker).build();

    heading("1. Instance A starts a session");
    let mut session = app_a.new_session(
        SessionOptions::new("note-taker-1").metadata_entry("title", "Errands".into()),
    )?;
    let id = session.id().clone();
    say(&mut session, "A", "buy milk").await?;
    let revision = app_a.save_session(&mut session)?;
    println!("A saved revision {revision}");
    show_service(&service);

    heading("2. Both instances resume it, and both change it");
    let mut in_a = app_a.resume_session(&id, None)?;
    let mut in_b = app_b.resume_session(&id, None)?;
    println!(
        "A and B both loaded revision {} ({} messages)",
        in_a.revision(),
        in_a.transcript().len()
    );
    say(&mut in_a, "A", "call the plumber").await?;
    say(&mut in_b, "B", "book the dentist").await?;
    println!("A saves: revision {}", app_a.save_session(&mut in_a)?);
    match app_b.save_session(&mut in_b) {
        Err(err) if err.is_conflict() => {
            println!("B saves: refused, so A's turn is not overwritten:");
            println!("  {err}");
        }
        Err(err) => return Err(err.into()),
        Ok(revision) => {
            return Err(format!("B's stale save was accepted at revision {revision}").into())
        }
    }
    let stored = app_a.store().load(&id)?;
    println!(
        "Stored: revision {}, last note {:?}",
        stored.revision(),
        last_user_text(stored.transcript())
    );

    heading("3. B recovers: load again, reapply, save");
    let mut in_b = app_b.resume_session(&id, None)?;
    say(&mut in_b, "B", "book the dentist").await?;
    println!("B saves: revision {}", app_b.save_session(&mut in_b)?);

    heading("4. Creating a session whose id is taken is a conflict too");
    let fresh = SessionSnapshot::builder(id.clone(), "note-taker-1").build()?;
    match app_b.store().save(&fresh) {
        Err(err) if err.is_conflict() => println!("  {err}"),
        Err(err) => return Err(err.into()),
        Ok(revision) => {
            return Err(format!("a second create was accepted at revision {revision}").into())
        }
    }

    heading("5. Fork, export, import and prune come with every store");
    // `SessionStoreExt` builds them on the store's methods.
    let fork = app_a.fork_session(&id, ForkAt::Turns(1))?;
    println!(
        "forked {} at message {} into {} ({} messages)",
        id,
        fork.lineage().map_or(0, |l| l.fork_point),
        fork.id(),
        fork.transcript().len()
    );
    let bundle = app_a
        .store()
        .export(&[id.clone(), fork.id().clone()])?
        .to_json()?;
    let elsewhere = KvSessionStore::new(Arc::new(KeyValueService::default()));
    let imported = elsewhere.import(&Bundle::from_json(&bundle)?, &ImportIds::Keep)?;
    println!(
        "exported {} bytes; imported {} sessions into another service",
        bundle.len(),
        imported.len()
    );
    let preview = app_a.prune_sessions(&PrunePolicy::new().max_count(1).dry_run(true))?;
    for pruned in &preview.pruned {
        println!(
            "a prune keeping 1 session would delete {} ({})",
            pruned.summary.id, pruned.reason
        );
    }

    heading("6. Archiving keeps a session but takes it out of the listing");
    app_a.store().set_archived(fork.id(), true)?;
    let active = app_a.list_sessions()?.sessions.len();
    let archived = app_a.store().list_scoped(ListScope::Archived)?.sessions;
    println!(
        "{active} active, archived: {}",
        archived
            .iter()
            .map(|s| s.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "the archived fork still loads: {} messages",
        app_a.store().load(fork.id())?.transcript().len()
    );

    heading("7. What is stored");
    for summary in app_b.list_sessions()?.sessions {
        println!(
            "{}  revision {}, {} messages, {}  \"{}\"",
            summary.id,
            summary.revision,
            summary.message_count,
            summary.cost,
            summary.title.as_deref().unwrap_or("untitled")
        );
    }
    show_service(&service);
    app_b.delete_session(&id)?;
    println!(
        "After delete_session: {} sessions",
        app_b.list_sessions()?.sessions.len()
    );

    heading("8. The store contract suite");
    // Every case on a fresh, empty store; a failing case panics with its name.
    let report = testing::contract(|| KvSessionStore::new(Arc::new(KeyValueService::default())));
    println!("{report}");
    // This store keeps only the head, so the history cases are skipped (said in the
    // report); every other case runs.
    report.assert_complete_except(&[testing::HISTORY, testing::LEASES]);
    Ok(())
}

/// Sends `text` as instance `who` and prints the reply.
async fn say<E: Engine>(
    session: &mut agent_session::Session<E>,
    who: &str,
    text: &str,
) -> agent_session::Result<()> {
    let outcome = session.send(text).await?;
    println!(
        "{who}> {text}\n   {}",
        outcome.reply.as_deref().unwrap_or("(no reply)")
    );
    Ok(())
}

fn last_user_text(transcript: &[Message]) -> String {
    transcript
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

/// Prints the service's keys and versions, and the revision written inside each session.
fn show_service(service: &KeyValueService) {
    println!("Key-value service now holds:");
    for key in service.keys_with_prefix("") {
        if let Some(entry) = service.get(&key) {
            if key.starts_with(ARCHIVED) {
                println!(
                    "  {key}: the archive marker of the session created at {}",
                    String::from_utf8_lossy(&entry.bytes)
                );
                continue;
            }
            let embedded = serde_json::from_slice::<serde_json::Value>(&entry.bytes)
                .ok()
                .and_then(|json| json.get("revision")?.as_u64());
            println!(
                "  {key}: version {}, {} bytes of JSON with \"revision\": {}",
                entry.version,
                entry.bytes.len(),
                embedded.map_or_else(|| "?".to_owned(), |r| r.to_string()),
            );
        }
    }
}

fn heading(title: &str) {
    println!();
    println!("{title}");
    println!("{}", "-".repeat(title.chars().count()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same cases as the crate's own stores, none skipped but the history's: this
    /// store archives and writes nothing for an unchanged snapshot, and keeps only the
    /// head (`load_at`, `revisions`, `history` and `restore` are the trait's defaults).
    #[test]
    fn the_key_value_store_meets_the_whole_store_contract() {
        let report =
            testing::contract(|| KvSessionStore::new(Arc::new(KeyValueService::default())));
        report.assert_complete_except(&[testing::HISTORY, testing::LEASES]);
        assert!(report
            .skipped
            .iter()
            .all(|s| s.needs == testing::HISTORY || s.needs == testing::LEASES));
    }

    /// A marker left behind by a delete that stopped between its two keys does not archive
    /// the next session saved under the same id.
    #[test]
    fn a_stale_archive_marker_does_not_archive_a_new_session() -> agent_session::Result<()> {
        let service = Arc::new(KeyValueService::default());
        let store = KvSessionStore::new(Arc::clone(&service));
        let id = SessionId::parse("s")?;
        let yesterday = chrono::Utc::now() - chrono::Duration::days(1);
        let old = SessionSnapshot::builder(id.clone(), "m")
            .timestamps(yesterday, yesterday)
            .build()?;
        store.save(&old)?;
        store.set_archived(&id, true)?;
        // The delete stops after the session's key: its marker stays.
        service.delete(&KvSessionStore::key(&id));
        assert!(service.get(&KvSessionStore::marker_key(&id)).is_some());

        store.save(&SessionSnapshot::builder(id.clone(), "m").build()?)?;
        assert_eq!(store.list()?.sessions.len(), 1);
        assert!(store.list_scoped(ListScope::Archived)?.sessions.is_empty());

        // The same session saved again as new (an import keeps its creation time).
        store.set_archived(&id, true)?;
        let again = store.load(&id)?;
        service.delete(&KvSessionStore::key(&id));
        store.save(&again.clone().with_revision(Revision::NEW))?;
        assert!(store.list_scoped(ListScope::Archived)?.sessions.is_empty());
        Ok(())
    }

    /// A session deleted and created again after it was listed is not the one listed,
    /// even where the service's version of its key starts over at the same number: the
    /// store's check refuses it, and so does the service's delete, which the store makes
    /// conditional on the exact bytes it checked (what closes the window between the two).
    #[test]
    fn the_conditional_delete_keeps_a_session_created_again_since_the_listing(
    ) -> agent_session::Result<()> {
        let service = Arc::new(KeyValueService::default());
        let store = KvSessionStore::new(Arc::clone(&service));
        let id = SessionId::parse("s")?;
        let key = KvSessionStore::key(&id);
        let yesterday = chrono::Utc::now() - chrono::Duration::days(1);
        store.save(
            &SessionSnapshot::builder(id.clone(), "m")
                .timestamps(yesterday, yesterday)
                .build()?,
        )?;
        let listed = store.list()?.sessions.remove(0);
        let checked = service.get(&key).expect("stored");
        store.delete(&id)?;
        store.save(&SessionSnapshot::builder(id.clone(), "m").build()?)?;
        assert_eq!(
            service.get(&key).map(|entry| entry.version),
            Some(checked.version)
        );
        assert_eq!(service.delete_if_same(&key, &checked), Err(Some(1)));
        let err = store.delete_if_unchanged(&listed).unwrap_err();
        assert!(matches!(err, Error::Changed { .. }), "{err:?}");
        assert!(store.load(&id).is_ok(), "the new session was deleted");
        Ok(())
    }
}
