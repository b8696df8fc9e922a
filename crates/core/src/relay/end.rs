//! How an answer's response ended, read in one walk of its top level: the usage it reported and the
//! reasoning the provider says it dropped from the input (`drops`). A whole JSON answer, the
//! `response` of a terminal SSE event and that of a WebSocket turn's last frame are read alike.

use crate::drops::ReasoningDropped;
use crate::spend::Usage;

/// What the end of one answer says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerEnd {
    /// The tokens it used, in the tier it was billed in.
    pub usage: Option<Usage>,
    /// The reasoning the provider removed from its input, other than at turn boundaries.
    pub dropped: Option<ReasoningDropped>,
}

/// The members of a response read at its end, in the order `top_level_values` returns them.
const MEMBERS: [&[u8]; 4] = [b"usage", b"service_tier", b"prompt_cache_retention", b"input_transformations"];

impl AnswerEnd {
    /// The end of a complete JSON answer (a Responses object or a chat completion). Walked, not parsed
    /// (`scan::top_level_values`: the output it carries, most of its bytes, is jumped over); an answer
    /// that spells keys with escapes, which no provider writes, is parsed instead.
    pub fn from_body(body: &[u8]) -> Self {
        if crate::scan::has_ascii_escape(body) {
            return Self::parsed(body);
        }
        Self::walked(body)
    }

    /// `from_body` of a body known to spell no key with escapes (a part of a text checked whole).
    pub(crate) fn walked(body: &[u8]) -> Self {
        let Some([usage, tier, retention, transformations]) = crate::scan::top_level_values(body, MEMBERS) else {
            return Self::default();
        };
        Self {
            usage: Usage::from_walked(usage, tier, retention),
            dropped: transformations.and_then(ReasoningDropped::from_text),
        }
    }

    /// `from_body` by a parser: everything but the four values is skipped by serde, without a tree.
    pub(super) fn parsed(body: &[u8]) -> Self {
        #[derive(serde::Deserialize)]
        struct Top<'a> {
            #[serde(default)]
            usage: Option<serde_json::Value>,
            #[serde(default)]
            service_tier: Option<String>,
            #[serde(default)]
            prompt_cache_retention: Option<String>,
            #[serde(borrow, default)]
            input_transformations: Option<&'a serde_json::value::RawValue>,
        }
        let Ok(top) = serde_json::from_slice::<Top<'_>>(body) else { return Self::default() };
        Self {
            usage: Usage::from_parsed(
                top.usage.as_ref(),
                top.service_tier.as_deref(),
                top.prompt_cache_retention.as_deref(),
            ),
            dropped: top.input_transformations.and_then(|t| ReasoningDropped::from_text(t.get().as_bytes())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DROPPED: &str = r#"[{"type":"reasoning","id":"rs_1","action":"removed","reason":"organization_mismatch"},
        {"type":"reasoning","id":"rs_2","action":"removed","reason":"turn_boundary"}]"#;

    #[test]
    fn one_walk_reads_the_usage_and_the_drops_as_a_parser_does() {
        let usage = r#"{"input_tokens":120,"input_tokens_details":{"cached_tokens":0},"output_tokens":7}"#;
        let bodies = [
            format!(r#"{{"id":"resp_1","output":[],"usage":{usage},"input_transformations":{DROPPED}}}"#),
            format!(r#"{{"input_transformations":{DROPPED},"service_tier":"flex","usage":{usage}}}"#),
            format!(r#"{{"inp\u0075t_transformations":{DROPPED},"usage":{usage}}}"#),
        ];
        for body in &bodies {
            let end = AnswerEnd::from_body(body.as_bytes());
            assert_eq!(end, AnswerEnd::parsed(body.as_bytes()), "{body}");
            assert_eq!(end.usage.map(|u| u.input), Some(120), "{body}");
            let dropped = end.dropped.expect("one removal that counts");
            assert_eq!((dropped.count, dropped.wrong_organization()), (1, true), "{body}");
        }
        let none = format!(r#"{{"usage":{usage},"input_transformations":[]}}"#);
        assert_eq!(AnswerEnd::from_body(none.as_bytes()).dropped, None);
        let nested = format!(r#"{{"usage":{usage},"output":[{{"input_transformations":{DROPPED}}}]}}"#);
        assert_eq!(AnswerEnd::from_body(nested.as_bytes()).dropped, None, "the top level only");
        assert_eq!(AnswerEnd::from_body(b"not json"), AnswerEnd::default());
    }
}
