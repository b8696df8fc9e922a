//! What the pool is told: how a request begins on a key (`Begin`), and what the provider taught about
//! it (`Learned`: an answer's `Outcome`, a finished answer's usage, or the reasoning it lost).

use std::time::Instant;

use super::OutcomeKind;
use crate::keys::KeyId;
use crate::quota::Reading;
use crate::spend::Usage;

/// What one upstream answer (or failure) taught about a key.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The key.
    pub key: KeyId,
    /// When it was observed.
    pub at: Instant,
    /// What happened.
    pub kind: OutcomeKind,
    /// The upstream status, if an answer came back.
    pub status: Option<u16>,
    /// The `openai-organization` the upstream reported, if any.
    pub org: Option<String>,
    /// The rate-limit windows the answer reported.
    pub limits: Reading,
    /// The provider said this key cannot use this model.
    pub model_missing: Option<String>,
    /// The provider answered `invalid_encrypted_content` to a request Keymux had pinned correctly.
    pub invalid_encrypted: bool,
    /// A ChatGPT plan's usage windows, when the answer reported them (boxed: most answers have none).
    pub plan: Option<Box<keymux_core::provider::chatgpt::PlanWindows>>,
}

impl Outcome {
    /// An outcome with nothing but its kind.
    pub fn new(key: KeyId, at: Instant, kind: OutcomeKind) -> Self {
        Self {
            key,
            at,
            kind,
            status: None,
            org: None,
            limits: Reading::default(),
            model_missing: None,
            invalid_encrypted: false,
            plan: None,
        }
    }
}

/// What the provider taught: an answer, or the token usage of a finished one.
#[derive(Clone, Debug)]
pub enum Learned {
    /// What one attempt taught (an answer, or a failure to get one).
    Outcome(Outcome),
    /// A finished answer's usage, on UTC day `day`.
    Usage {
        /// The key.
        key: KeyId,
        /// The usage.
        usage: Usage,
        /// UTC day number.
        day: u32,
    },
    /// A served answer said the provider dropped reasoning from its input (`drops`).
    ReasoningDropped {
        /// The key that served it.
        key: KeyId,
    },
}

/// How a request begins on a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Begin {
    /// Its estimated tokens, counted down from the key's windows.
    pub tokens: u64,
    /// It was placed by load alone: it counts as a session start for the spread.
    pub start: bool,
}
