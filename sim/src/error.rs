//! OpenAI-shaped errors: status, `{"error":{message,type,param,code}}` body and extra headers.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Map, Value};

use crate::util::{ceil_millis, ceil_secs, format_reset, mask_key};

/// An error answer, rendered as an HTTP response or a WebSocket error frame.
#[derive(Debug, Clone)]
pub(crate) struct ApiError(Box<ErrorParts>);

/// The parts of an [`ApiError`].
#[derive(Debug, Clone)]
pub(crate) struct ErrorParts {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Extra response headers such as `retry-after`.
    pub headers: Vec<(&'static str, String)>,
    /// Leave out `openai-organization` (the caller is not treated as authenticated).
    pub hide_org: bool,
    /// A member of the error object named by what it holds (`Fault::QuotesKey` names one by the key).
    pub named_member: Option<String>,
}

const INVALID_REQUEST: &str = "invalid_request_error";

impl std::ops::Deref for ApiError {
    type Target = ErrorParts;
    fn deref(&self) -> &ErrorParts {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ErrorParts {
        &mut self.0
    }
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: String) -> Self {
        ApiError(Box::new(ErrorParts {
            status,
            message,
            kind,
            param: None,
            code: None,
            headers: Vec::new(),
            hide_org: false,
            named_member: None,
        }))
    }

    fn code(mut self, code: &str) -> Self {
        self.code = Some(code.to_owned());
        self
    }

    fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    /// The `error` object.
    pub(crate) fn error_object(&self) -> Value {
        let mut object = json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        });
        if let Some(name) = &self.named_member {
            object[name.as_str()] = json!("quoted as a member name");
        }
        object
    }

    /// The HTTP body.
    pub(crate) fn body(&self) -> Value {
        json!({ "error": self.error_object() })
    }

    /// The WebSocket error frame; `headers` are added when there are any.
    pub(crate) fn ws_frame(&self, headers: &[(String, String)]) -> Value {
        let mut frame = Map::new();
        frame.insert("type".into(), json!("error"));
        frame.insert("status".into(), json!(self.status.as_u16()));
        frame.insert(
            "error".into(),
            json!({
                "type": self.kind,
                "code": self.code,
                "message": self.message,
                "param": self.param,
            }),
        );
        if !headers.is_empty() {
            let map: Map<String, Value> = headers.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            frame.insert("headers".into(), Value::Object(map));
        }
        Value::Object(frame)
    }

    /// What the log records as the error code.
    pub(crate) fn log_code(&self) -> String {
        self.code.clone().unwrap_or_else(|| self.kind.to_owned())
    }

    pub(crate) fn missing_key() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            INVALID_REQUEST,
            "You didn't provide an API key. You need to provide your API key in an Authorization \
             header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password \
             field (with blank username) if you're accessing the API from your browser and are \
             prompted for a username and password. You can obtain an API key from \
             https://platform.openai.com/account/api-keys."
                .to_owned(),
        );
        e.hide_org = true;
        e
    }

    pub(crate) fn invalid_key(presented: &str) -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            INVALID_REQUEST,
            format!(
                "Incorrect API key provided: {}. You can find your API key at \
                 https://platform.openai.com/account/api-keys.",
                mask_key(presented)
            ),
        )
        .code("invalid_api_key");
        e.hide_org = true;
        e
    }

    pub(crate) fn quotes_key(secret: &str) -> Self {
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!(
                "Request refused for key:{secret} (key={secret}; api_key=\"{secret}\"; {{'key':'{secret}'}}, \
                 <{secret}>). Ask your administrator."
            ),
        )
        .code("key_not_allowed");
        e.headers = vec![
            ("location", format!("https://platform.openai.com/account/api-keys?key={secret}")),
            ("www-authenticate", format!("Bearer realm=\"OpenAI\", error=\"key_not_allowed\", key=\"{secret}\"")),
            ("x-debug-key", secret.to_owned()),
        ];
        e.named_member = Some(secret.to_owned());
        e
    }

    pub(crate) fn invalid_url(method: &str, path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, INVALID_REQUEST, format!("Invalid URL ({method} {path})"))
    }

    pub(crate) fn bad_json() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            "We could not parse the JSON body of your request. (HINT: This likely means you \
             aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but \
             what was sent was not valid JSON. If you have trouble figuring out how to fix this, \
             please contact us through our help center at help.openai.com.)"
                .to_owned(),
        )
    }

    pub(crate) fn invalid_value(param: &str, message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message).param(param).code("invalid_value")
    }

    pub(crate) fn invalid_type(param: &str, message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message).param(param).code("invalid_type")
    }

    pub(crate) fn missing_param(param: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, format!("Missing required parameter: '{param}'."))
            .param(param)
            .code("missing_required_parameter")
    }

    pub(crate) fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            INVALID_REQUEST,
            format!("The model `{model}` does not exist or you do not have access to it."),
        )
        .code("model_not_found")
    }

    pub(crate) fn previous_response_not_found(id: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, format!("Previous response with id '{id}' not found."))
            .param("previous_response_id")
            .code("previous_response_not_found")
    }

    pub(crate) fn response_not_found(id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, INVALID_REQUEST, format!("No response found with id '{id}'."))
    }

    pub(crate) fn cannot_cancel(status: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, format!("Cannot cancel a {status} response."))
    }

    /// `item` is the id of the offending item, when it has one.
    pub(crate) fn invalid_encrypted_content(item: Option<&str>, reason: &str) -> Self {
        let subject = match item {
            Some(id) => format!("The encrypted content for item {id}"),
            None => "The encrypted content".to_owned(),
        };
        Self::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!("{subject} could not be verified. Reason: {reason}"),
        )
        .code("invalid_encrypted_content")
    }

    pub(crate) fn server_error() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "The server had an error while processing your request. Sorry about that!".to_owned(),
        )
    }

    pub(crate) fn overloaded(retry_after_secs: Option<u64>) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The server is overloaded or not ready yet.".to_owned(),
        );
        if let Some(secs) = retry_after_secs {
            e.headers.push(("retry-after", secs.to_string()));
            e.headers.push(("retry-after-ms", secs.saturating_mul(1000).to_string()));
        }
        e
    }

    pub(crate) fn insufficient_quota() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details. For \
             more information on this error, read the docs: \
             https://platform.openai.com/docs/guides/error-codes/api-errors."
                .to_owned(),
        )
        .code("insufficient_quota")
    }

    /// 429 for an exhausted window. `dimension` is `requests` or `tokens`.
    pub(crate) fn rate_limited(
        dimension: &'static str,
        model: &str,
        org: &str,
        limit: u64,
        used: u64,
        requested: u64,
        wait: Duration,
    ) -> Self {
        let (label, short) =
            if dimension == "tokens" { ("tokens per min", "TPM") } else { ("requests per min", "RPM") };
        let message = if requested > limit {
            format!(
                "Request too large for {model} in organization {org} on {label} ({short}): \
                 Limit {limit}, Requested {requested}. The input or output tokens must be \
                 reduced in order to run successfully. Visit \
                 https://platform.openai.com/account/rate-limits to learn more."
            )
        } else {
            format!(
                "Rate limit reached for {model} in organization {org} on {label} ({short}): \
                 Limit {limit}, Used {used}, Requested {requested}. Please try again in {}. \
                 Visit https://platform.openai.com/account/rate-limits to learn more.",
                format_reset(wait)
            )
        };
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, dimension, message).code("rate_limit_exceeded");
        e.headers.push(("retry-after", ceil_secs(wait).to_string()));
        e.headers.push(("retry-after-ms", ceil_millis(wait).to_string()));
        e
    }

    pub(crate) fn ws_connection_limit(limit: Duration) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!(
                "Responses websocket connection limit reached ({}). Create a new websocket \
                 connection to continue.",
                format_reset(limit)
            ),
        )
        .code("websocket_connection_limit_reached")
    }
}
