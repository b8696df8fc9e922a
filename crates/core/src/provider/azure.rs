//! Azure OpenAI's v1 API: an API key sent as `api-key`, a base URL every key must name
//! (`https://RESOURCE.openai.azure.com/openai/v1`), and no organization header in its answers: each
//! resource is an organization of its own, read from the base URL.

use super::{set_credential, Outgoing, Provider};
use crate::secrets::Secret;

/// Azure OpenAI.
pub struct Azure;

impl Provider for Azure {
    fn aliases(&self) -> &'static [&'static str] {
        &["azure-openai", "azure_openai"]
    }

    fn default_base<'a>(&self, _endpoints: &'a super::Endpoints) -> Option<&'a str> {
        None
    }

    fn check_new(&self, secret: &Secret, base_url: Option<&str>) -> Result<(), String> {
        if base_url.is_none() {
            return Err("an Azure key needs a base URL: https://RESOURCE.openai.azure.com/openai/v1".into());
        }
        crate::keys::validate_secret(secret.expose())
    }

    /// Azure sends no organization header: each resource is its own organization, read from the base
    /// URL when the user set none.
    fn org(&self, _secret: &Secret, base_url: Option<&str>, set: Option<String>) -> Option<String> {
        set.or_else(|| base_url.and_then(resource))
    }

    fn prepare(&self, secret: &Secret, request: &mut Outgoing<'_>) -> Result<(), String> {
        let value = http::HeaderValue::from_str(secret.expose());
        set_credential(request.headers, http::HeaderName::from_static("api-key"), value);
        Ok(())
    }
}

/// The resource a base URL names, as the organization Keymux files it under: `azure:HOST`.
fn resource(base_url: &str) -> Option<String> {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().filter(|h| !h.is_empty())?;
    Some(format!("azure:{}", host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_of_a_base_url_is_its_organization() {
        let org = |url: &str| Azure.org(&Secret::new("k"), Some(url), None);
        assert_eq!(org("https://Res1.openai.azure.com/openai/v1"), Some("azure:res1.openai.azure.com".into()));
        assert_eq!(org("https:///x"), None);
        assert_eq!(Azure.org(&Secret::new("k"), None, None), None);
        assert_eq!(Azure.org(&Secret::new("k"), Some("https://r/x"), Some("org-1".into())), Some("org-1".into()));
    }

    #[test]
    fn a_key_needs_a_base_url_and_goes_as_api_key() {
        assert!(Azure.check_new(&Secret::new("abc"), None).expect_err("refused").contains("base URL"));
        assert!(Azure.check_new(&Secret::new("abc"), Some("https://r.openai.azure.com/openai/v1")).is_ok());
        let mut headers = http::HeaderMap::new();
        let method = http::Method::POST;
        let mut out =
            Outgoing { method: &method, path_and_query: "/responses", headers: &mut headers, body: Default::default() };
        Azure.prepare(&Secret::new("abc"), &mut out).expect("prepared");
        assert_eq!(headers.get("api-key").map(|v| v.as_bytes()), Some(&b"abc"[..]));
        assert!(headers.get("authorization").is_none());
    }
}
