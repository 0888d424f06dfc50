//! Redacting the stored copy of a snapshot, keeping what it shares with a stored revision
//! true.

use std::sync::Arc;

use super::SessionSnapshot;
use crate::redact::{self, Redactor};

impl SessionSnapshot {
    /// A copy with `redactor` applied to every string it carries (message text, tool
    /// arguments and results, provider fields, metadata values, the system prompt). Ids,
    /// tool names, roles, the model name and the tool-call records are kept, so the copy is
    /// as consistent as the original.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Message, PatternRedactor, SessionId, SessionSnapshot};
    ///
    /// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("my key is sk-abcdefghijklmnopqrstuvwxyz")])
    ///     .build()?;
    /// let redacted = snapshot.redacted(&PatternRedactor::common_secrets());
    /// assert_eq!(redacted.transcript()[0].text(), "my key is [REDACTED]");
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn redacted(&self, redactor: &dyn Redactor) -> SessionSnapshot {
        let mut copy = self.clone();
        copy.redact(redactor);
        copy
    }

    /// Applies `redactor` in place (see [`redacted`](Self::redacted)), for callers that
    /// already own a fresh copy.
    pub(crate) fn redact(&mut self, redactor: &dyn Redactor) {
        let id = redactor.rules_id();
        if let Some(prompt) = &mut self.options.system_prompt {
            redact::redact_string(redactor, prompt);
        }
        redact::redact_map(redactor, &mut self.metadata);
        let kept = self
            .provenance
            .as_ref()
            .map_or(0..0, |p| p.pending.kept_range());
        let mut changed_kept = false;
        for (i, message) in Arc::make_mut(&mut self.transcript).iter_mut().enumerate() {
            if redact::redact_message(redactor, message) && kept.contains(&i) {
                changed_kept = true;
            }
        }
        // Messages a store already holds changed: they are still the stored ones only if
        // the stored copy was redacted with this same redactor.
        let stored_redacted_alike =
            id.is_some() && self.provenance.as_ref().is_some_and(|p| p.redactor == id);
        if changed_kept && !stored_redacted_alike {
            self.provenance = None;
            // The stored history holds the text the redactor now removes: the save
            // replaces it (see `SessionStore::save`).
            self.replaces_history = true;
        }
        self.redacted_by = id;
    }
}
