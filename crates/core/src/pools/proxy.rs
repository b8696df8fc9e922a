//! A pool's proxy: the URL checked (no user or password in it), split from its login, shown without
//! it, and the rule that a key in two pools goes out one way.

use super::PoolConfig;

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
            if earlier.proxy == pool.proxy {
                continue;
            }
            let shared = pool.keys.iter().find(|k| earlier.keys.iter().any(|e| e.eq_ignore_ascii_case(k)));
            if let Some(key) = shared {
                let way = |p: &PoolConfig| p.proxy.as_deref().map_or_else(|| "no proxy".to_owned(), safe_proxy);
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
