//! OpenAI's API: an API key sent as `Authorization: Bearer`, every operation and transport, the
//! organization named by each answer's `openai-organization`. Every default of [`Provider`] is its
//! behaviour.

use super::Provider;

/// OpenAI's API, unless `upstream` or `KEYMUX_UPSTREAM` says otherwise.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// OpenAI's id, for the flows that import an API key found on this machine.
pub const ID: super::ProviderId = super::ProviderId::Openai;

/// OpenAI's API.
pub struct OpenAi;

impl Provider for OpenAi {}
