//! Why a change could not be made, and how each refusal answers on the control API.

use axum::http::StatusCode;

use crate::config::ConfigError;
use crate::error::{ApiError, ChangeFailure};
use crate::secrets::SecretsError;

/// The control API's error code for [`ControlError::AlreadyPooled`], which the CLI reads.
pub const ALREADY_POOLED: &str = "key_already_pooled";

/// Why a change could not be made. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No such key or token.
    #[error("{0}")]
    NotFound(String),
    /// The request is not acceptable as it is.
    #[error("{0}")]
    Invalid(String),
    /// The secret is pooled already, as the key labelled so: two keys with one secret would be one key
    /// twice (switching one off would change nothing).
    #[error(
        "this secret is already in the pool as key '{0}'; a secret is pooled once (to change that key's secret, use \
         `keymux keys set {0} --secret`)"
    )]
    AlreadyPooled(String),
    /// The keychain failed.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    /// The config file could not be written.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A client's setup was refused or failed (`setup`); the message says what to do.
    #[error(transparent)]
    Setup(crate::setup::SetupError),
}

impl ControlError {
    /// How this failure answers: its status, OpenAI error type and code, and its message.
    pub fn failure(&self) -> ChangeFailure {
        let (status, kind, code) = match self {
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "invalid_request_error", "not_found"),
            Self::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_value"),
            Self::AlreadyPooled(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", ALREADY_POOLED),
            Self::Secrets(_) | Self::Config(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "server_error", "keymux_control_failed")
            }
            Self::Setup(e) => setup_failure(e),
        };
        ChangeFailure { status, kind, code, message: self.to_string() }
    }
}

/// How a refused setup answers: 409 with a code that names what the person can do (the choice that
/// makes it, a new preview, an undo first), 422 for a file Keymux will not rewrite.
fn setup_failure(e: &crate::setup::SetupError) -> (StatusCode, &'static str, &'static str) {
    use crate::setup::{Remedy, SetupError as E};
    let conflict = |code| (StatusCode::CONFLICT, "invalid_request_error", code);
    match e {
        E::Refused { remedy: Remedy::CustomProvider, .. } => conflict("setup_needs_custom_provider"),
        E::Refused { remedy: Remedy::Force, .. } => conflict("setup_needs_force"),
        E::ChangedSincePreview { .. } => conflict("setup_changed_since_preview"),
        E::NothingToDo { .. } => conflict("setup_nothing_to_do"),
        E::OtherSetup { .. } => conflict("setup_other_setup"),
        E::NothingToUndo { .. } => (StatusCode::NOT_FOUND, "invalid_request_error", "setup_nothing_to_undo"),
        E::EditedSince { .. } => conflict("setup_edited_since"),
        E::LineChanged { .. } => conflict("setup_line_changed"),
        E::Unreadable { .. } | E::Unexpected { .. } | E::CannotRead { .. } | E::TooLarge { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request_error", "setup_file_refused")
        }
        E::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_value"),
        E::BackupMissing { .. } | E::Io { .. } => (StatusCode::SERVICE_UNAVAILABLE, "server_error", "setup_failed"),
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        Self::Control(e.failure())
    }
}
