//! Tokens issued to a client's login (`oauth`) and refreshed: the login is a client token listed in the config
//! (`login = true`), its access token in the token set until [`ACCESS_TTL`] is up, the digest
//! of its refresh token in the keychain and in [`crate::oauth::Logins`].

use serde::Serialize;

use crate::gateway::Gateway;
use crate::oauth::{OAuthError, ACCESS_TTL, REFRESH_PREFIX};
use crate::secrets::{self, account, Secret};

/// The token endpoint's answer (RFC 6749 section 5.1). Never logged; its `Debug` shows no token.
#[derive(Serialize)]
pub(crate) struct Issued {
    access_token: String,
    token_type: &'static str,
    expires_in: u64,
    refresh_token: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("expires_in", &self.expires_in).finish_non_exhaustive()
    }
}

fn server_error(e: impl std::fmt::Display) -> OAuthError {
    OAuthError::new("server_error", format!("Keymux could not keep the login: {e}"))
}

impl Gateway {
    /// Issues a login to `client` bound to `pool`: a new client token named after the client
    /// (`codex-login`, `codex-login-2`…), listed with the user's tokens.
    pub(crate) async fn issue_login(&self, client: &str, pool: &str) -> Result<Issued, OAuthError> {
        let refresh = secrets::generate(REFRESH_PREFIX);
        let stored = Secret::new(hex::encode(crate::oauth::pending::digest(refresh.expose())));
        let taken: Vec<String> = self.settings().config().tokens.into_iter().map(|t| t.name).collect();
        let name = crate::control::free_token_name(&format!("{client}-login"), &taken);
        let created = self.clock().unix_ms() / 1000;
        let listed = crate::control::store_token(self.settings(), &name, pool, created, true, &stored)
            .await
            .map_err(|e| OAuthError::new("invalid_grant", e.to_string()))?;
        self.logins().issued(&listed.id, refresh.expose());
        self.notify(crate::events::GatewayEvent::TokenCreated { name: listed.name.clone() });
        Ok(self.grant_access(&listed.id, &listed.name, &listed.pool, refresh))
    }

    /// Swaps a refresh token for a new access token and a new refresh token; the old one stops working.
    /// A revoked login's refresh token is refused (`invalid_grant`, so the client logs in again).
    pub(crate) async fn refresh_login(&self, presented: &str) -> Result<Issued, OAuthError> {
        let refused = || {
            OAuthError::new(
                "invalid_grant",
                "this login was revoked or its refresh token was used already; log in again",
            )
        };
        let next = secrets::generate(REFRESH_PREFIX);
        let id = self.logins().rotate(presented, next.expose()).ok_or_else(refused)?;
        let Some(listed) = self.settings().config().tokens.into_iter().find(|t| t.id == id && t.login) else {
            self.logins().forget(&id);
            return Err(refused());
        };
        let stored = Secret::new(hex::encode(crate::oauth::pending::digest(next.expose())));
        let account = account::token(&id);
        secrets::blocking(self.settings().store().clone(), move |s| s.set(&account, &stored))
            .await
            .map_err(server_error)?;
        Ok(self.grant_access(&listed.id, &listed.name, &listed.pool, next))
    }

    /// A new access token for the login `id`, in the token set in place of its last one.
    fn grant_access(&self, id: &str, name: &str, pool: &str, refresh: Secret) -> Issued {
        let access = secrets::generate(crate::tokens::TOKEN_PREFIX);
        let expires = self.clock().unix_ms() + u64::try_from(ACCESS_TTL.as_millis()).unwrap_or(u64::MAX);
        self.swap_tokens(|set| set.with_expiring(id, name, pool, &access, expires));
        Issued {
            access_token: access.expose().to_owned(),
            token_type: "Bearer",
            expires_in: ACCESS_TTL.as_secs(),
            refresh_token: refresh.expose().to_owned(),
        }
    }
}
