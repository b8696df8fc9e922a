//! A pool's proxy: the URL checked (no user or password in it), split from its login (kept in the
//! keychain), shown without it, the rule that a key in two pools goes out one way, and the proxy each
//! key goes out through.

use super::{PoolConfig, Pools};
use crate::keys::KeyId;
use crate::secrets::Secret;

/// The proxy schemes Keymux speaks.
pub const PROXY_SCHEMES: [&str; 4] = ["http", "https", "socks5", "socks5h"];

/// Checks a pool's `proxy`: an `http`, `https`, `socks5` (names resolved by Keymux) or `socks5h`
/// (names resolved by the proxy) URL with a host and a port (or the scheme's default), and nothing else: no user or password (Keymux keeps no proxy credentials in the
/// config file, where they would be readable), no path, query or fragment. Returns the URL as it is
/// kept (no trailing `/`).
pub fn check_proxy(url: &str) -> Result<String, String> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("the proxy '{}' must be a URL such as http://proxy.example:3128", safe_proxy(url)))?;
    let scheme = scheme.to_ascii_lowercase();
    if !PROXY_SCHEMES.contains(&scheme.as_str()) {
        return Err(format!(
            "the proxy's scheme '{scheme}' is not one Keymux speaks; use an HTTP proxy (http:// or https://) or a \
             SOCKS5 proxy (socks5://, or socks5h:// to have the proxy resolve host names)"
        ));
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err(format!(
            "the proxy URL carries a user or password ({}), which Keymux never keeps in the config file or the \
             API's answers: set the proxy with `keymux pool set NAME --proxy URL` (or the dashboard), which keeps \
             them in the keychain",
            safe_proxy(url)
        ));
    }
    if authority.is_empty() || authority.contains(['/', '?', '#', ' ']) {
        return Err(format!(
            "the proxy '{}' must be only a scheme, a host and a port, such as http://proxy.example:3128",
            safe_proxy(url)
        ));
    }
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, port)| port),
        None => authority.rsplit_once(':').map(|(_, port)| port),
    };
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return Err(format!("the proxy '{}' has a port that is not a number", safe_proxy(url)));
    }
    Ok(format!("{scheme}://{authority}"))
}

/// Splits a proxy URL given with a user and password (`http://user:password@host:port`) into the URL
/// without them (checked by [`check_proxy`]) and `user:password`, as the keychain keeps it. A URL
/// without them gives `None`. The errors never quote them.
pub fn split_proxy(url: &str) -> Result<(String, Option<String>), String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else { return check_proxy(url).map(|u| (u, None)) };
    let Some((login, host)) = rest.rsplit_once('@') else { return check_proxy(url).map(|u| (u, None)) };
    if login.is_empty() || login.contains(['/', '?', '#']) {
        return Err(format!("the proxy URL {} is not one Keymux can read", safe_proxy(url)));
    }
    Ok((check_proxy(&format!("{scheme}://{host}"))?, Some(login.to_owned())))
}

/// A proxy URL as it may be shown: any user or password replaced by `***`.
pub fn safe_proxy(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_owned(),
        },
    }
}

/// A key in two pools with different proxies: a key has one way out, so its pools must agree.
pub(super) fn proxy_conflict(pools: &[PoolConfig]) -> Option<(usize, String)> {
    for (i, pool) in pools.iter().enumerate() {
        for earlier in &pools[..i] {
            if earlier.policies.proxy == pool.policies.proxy {
                continue;
            }
            let shared = pool.keys.iter().find(|k| earlier.keys.iter().any(|e| e.eq_ignore_ascii_case(k)));
            if let Some(key) = shared {
                let way =
                    |p: &PoolConfig| p.policies.proxy.as_deref().map_or_else(|| "no proxy".to_owned(), safe_proxy);
                let message = format!(
                    "the key '{key}' is in pool '{}' ({}) and in pool '{}' ({}); a key goes out one way, so give \
                     both pools the same proxy or keep the key in one of them",
                    earlier.name,
                    way(earlier),
                    pool.name,
                    way(pool)
                );
                return Some((i, message));
            }
        }
    }
    None
}

/// What becomes of a pool's proxy login (its user and password, kept in the keychain) when it is saved.
#[derive(Debug)]
pub enum ProxyLogin {
    /// Nothing changes: the same proxy without a new login keeps the one kept, and a pool that had
    /// none still has none.
    Keep,
    /// A proxy URL given with a user and password: they are kept, the URL without them.
    Set(Secret),
    /// The pool had one, and now has no proxy, or one without a login: it is forgotten.
    Clear,
}

/// Makes `pool`'s proxy the one kept: checked and written as [`check_proxy`] writes it (an empty one is
/// none), its user and password taken out and `proxy_login` set when it had them. What becomes of the
/// login kept for it is returned; the same proxy as `before` (the pool before a change) without a user
/// and password keeps its login.
pub fn take_login(pool: &mut PoolConfig, before: Option<&PoolConfig>) -> Result<ProxyLogin, String> {
    let had = before.is_some_and(|b| b.proxy_login);
    let forget = if had { ProxyLogin::Clear } else { ProxyLogin::Keep };
    let (proxy, login, kept) = match pool.policies.proxy.as_deref().map(str::trim) {
        None | Some("") => (None, forget, false),
        Some(proxy) => {
            let (url, login) = split_proxy(proxy)?;
            let same = had && before.is_some_and(|b| b.policies.proxy.as_deref() == Some(url.as_str()));
            match login {
                Some(login) => (Some(url), ProxyLogin::Set(Secret::new(login)), true),
                None if same => (Some(url), ProxyLogin::Keep, true),
                None => (Some(url), forget, false),
            }
        }
    };
    (pool.policies.proxy, pool.proxy_login) = (proxy, kept);
    Ok(login)
}

impl PoolConfig {
    /// Whether its requests go out with a login kept in the keychain: it has a proxy, given with a
    /// user and password.
    pub fn uses_proxy_login(&self) -> bool {
        self.proxy_login && self.policies.proxy.is_some()
    }
}

impl Pools {
    /// The proxy each key goes out through, for the keys of pools that have one, with the pool whose
    /// login it uses when it has one (pools that share a key have the same proxy: `validate` checks
    /// it; the first such pool's login).
    pub fn proxies(&self) -> Vec<(KeyId, String, Option<String>)> {
        let mut out: Vec<(KeyId, String, Option<String>)> = Vec::new();
        for (def, resolved) in self.defs.iter().zip(&self.resolved) {
            let Some(proxy) = &def.policies.proxy else { continue };
            for key in &resolved.keys {
                if !out.iter().any(|(k, ..)| k == key) {
                    out.push((key.clone(), proxy.clone(), def.proxy_login.then(|| def.name.clone())));
                }
            }
        }
        out
    }

    /// The proxy `key` goes out through (its pools' proxy), if any.
    pub fn proxy_of(&self, key: &KeyId) -> Option<&str> {
        let mut pools = self.defs.iter().zip(&self.resolved);
        pools
            .find(|(def, resolved)| def.policies.proxy.is_some() && resolved.keys.contains(key))
            .and_then(|(def, _)| def.policies.proxy.as_deref())
    }
}
