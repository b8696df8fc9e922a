//! What the provider says it dropped from a request's input: the response's `input_transformations`
//! (`[{"type":"reasoning","id":"rs_…","action":"removed","reason":…}]`). Newer OpenAI models drop
//! reasoning items they cannot use instead of answering 400 `invalid_encrypted_content`: a turn that
//! lost its session's reasoning (and the prompt cache behind it) then looks like a success. The relay
//! reads this on the same walk that reads an answer's usage; the decision records it, the metrics and
//! the key's status count it, and an `organization_mismatch` tells the gateway the session's reasoning
//! lives elsewhere.
//!
//! `turn_boundary` removals (reasoning of earlier turns the model does not use) are normal and are
//! not counted. Every other reason is a drop; a reason Keymux does not know yet counts as `other`, so
//! a future kind of loss is seen rather than hidden.

use serde::Deserialize;

/// Why the provider removed a reasoning item (`turn_boundary` is not one: it is never recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Made by another organization: the request went where the session's reasoning does not live.
    OrganizationMismatch,
    /// Made for another end user (`safety_identifier`/`user`).
    EndUserMismatch,
    /// Made by another model.
    ModelMismatch,
    /// The input before it changed (a rewritten message, a shortened tool result, a compaction).
    PrefixMismatch,
    /// A reason this version of Keymux does not know.
    Other,
}

impl DropReason {
    /// The reason as the provider writes it; `None` for `turn_boundary`, which is no loss.
    fn read(reason: &str) -> Option<Self> {
        Some(match reason {
            "turn_boundary" => return None,
            "organization_mismatch" => Self::OrganizationMismatch,
            "end_user_mismatch" => Self::EndUserMismatch,
            "model_mismatch" => Self::ModelMismatch,
            "prefix_mismatch" => Self::PrefixMismatch,
            _ => Self::Other,
        })
    }

    /// Its name, as the API, the metrics and the dashboard write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::OrganizationMismatch => "organization_mismatch",
            Self::EndUserMismatch => "end_user_mismatch",
            Self::ModelMismatch => "model_mismatch",
            Self::PrefixMismatch => "prefix_mismatch",
            Self::Other => "other",
        }
    }
}

/// The reasoning items one answer says were removed from its input, `turn_boundary` removals left out.
/// Small and bounded whatever the answer holds: a count and the reasons given (a set of the five kinds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
pub struct ReasoningDropped {
    /// Reasoning items removed.
    pub count: u32,
    /// Each reason given, once, in the order of `DropReason`.
    #[ts(type = "Array<DropReason>")]
    reasons: Reasons,
}

/// A set of reasons, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reasons(u8);

impl DropReason {
    const ALL: [Self; 5] =
        [Self::OrganizationMismatch, Self::EndUserMismatch, Self::ModelMismatch, Self::PrefixMismatch, Self::Other];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl serde::Serialize for Reasons {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(DropReason::ALL.into_iter().filter(|r| self.0 & r.bit() != 0))
    }
}

/// One entry of `input_transformations`, as far as Keymux reads it.
#[derive(Deserialize)]
struct Transformation<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    action: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    reason: Option<std::borrow::Cow<'a, str>>,
}

impl ReasoningDropped {
    /// Reads the raw text of a response's `input_transformations`: the reasoning items it says were
    /// `removed`, other than at a turn boundary. `None` when there are none (or the text is not an array
    /// of objects: what cannot be read is not made up).
    pub fn from_text(text: &[u8]) -> Option<Self> {
        let entries: Vec<Transformation<'_>> = serde_json::from_slice(text).ok()?;
        let mut dropped = Self::default();
        for entry in &entries {
            if entry.kind.as_deref() != Some("reasoning") || entry.action.as_deref() != Some("removed") {
                continue;
            }
            let Some(reason) = DropReason::read(entry.reason.as_deref().unwrap_or_default()) else { continue };
            dropped.count = dropped.count.saturating_add(1);
            dropped.reasons.0 |= reason.bit();
        }
        (dropped.count > 0).then_some(dropped)
    }

    /// Whether the session's reasoning was made by another organization: the request did not reach
    /// where it lives.
    pub fn wrong_organization(&self) -> bool {
        self.has(DropReason::OrganizationMismatch)
    }

    /// Whether the answer gave `reason`.
    pub fn has(&self, reason: DropReason) -> bool {
        self.reasons.0 & reason.bit() != 0
    }

    /// The reasons given, each once, in the order of `DropReason`.
    pub fn reasons(&self) -> impl Iterator<Item = DropReason> + '_ {
        DropReason::ALL.into_iter().filter(|r| self.has(*r))
    }

    /// The reasons as logs and the CLI write them: `organization_mismatch, prefix_mismatch`.
    pub fn reasons_text(&self) -> String {
        self.reasons().map(DropReason::name).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_other_than_at_a_turn_boundary_are_counted_each_reason_once() {
        let text = br#"[{"type":"reasoning","id":"rs_1","action":"removed","reason":"organization_mismatch"},
            {"type":"reasoning","id":"rs_2","action":"removed","reason":"turn_boundary"},
            {"type":"reasoning","id":"rs_3","action":"removed","reason":"organization_mismatch"},
            {"type":"reasoning","id":"rs_4","action":"removed","reason":"a_reason_from_the_future"},
            {"type":"reasoning","id":"rs_5","action":"kept","reason":"prefix_mismatch"},
            {"type":"message","id":"msg_1","action":"removed","reason":"prefix_mismatch"}]"#;
        let dropped = ReasoningDropped::from_text(text).expect("two kinds of loss");
        assert_eq!(dropped.count, 3);
        assert_eq!(dropped.reasons().collect::<Vec<_>>(), [DropReason::OrganizationMismatch, DropReason::Other]);
        let json = serde_json::to_value(dropped).expect("serializes");
        assert_eq!(json, serde_json::json!({"count": 3, "reasons": ["organization_mismatch", "other"]}));
        assert!(dropped.wrong_organization());
        assert_eq!(dropped.reasons_text(), "organization_mismatch, other");
    }

    #[test]
    fn turn_boundaries_alone_nothing_and_what_cannot_be_read_are_no_drop() {
        let boundary = br#"[{"type":"reasoning","id":"rs_1","action":"removed","reason":"turn_boundary"}]"#;
        assert_eq!(ReasoningDropped::from_text(boundary), None);
        for text in [&b"[]"[..], b"null", b"{}", b"[1,2]", b"[{\"type\":"] {
            assert_eq!(ReasoningDropped::from_text(text), None, "{}", String::from_utf8_lossy(text));
        }
        let prefix = br#"[{"type":"reasoning","action":"removed","reason":"prefix_mismatch"}]"#;
        let dropped = ReasoningDropped::from_text(prefix).expect("a prefix change");
        assert!(!dropped.wrong_organization());
        assert_eq!((dropped.count, dropped.reasons_text().as_str()), (1, "prefix_mismatch"));
    }
}
