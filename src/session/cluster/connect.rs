//! A node's connection to the cluster's NATS servers: the servers `--cluster-nats` lists,
//! logged in with the user and password or the token their URLs carry, an nkey seed or a
//! credentials file, over TLS when asked; a password or token is never shown.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, ServerAddr};

use crate::config::ClusterConfig;

/// Connects node `node` to the NATS servers of `cluster`.
///
/// # Errors
/// When a server's URL can't be read, the servers carry different logins, more than one way
/// to log in is given, a credentials or key file can't be read, or NATS can't be reached
/// within 10 seconds.
pub(super) async fn client(
    cluster: &ClusterConfig,
    node: &str,
    request_timeout: Duration,
) -> anyhow::Result<Client> {
    let servers: Vec<&str> = cluster.nats.split(',').map(str::trim).collect();
    let listed = servers
        .iter()
        .map(|s| shown(s))
        .collect::<Vec<_>>()
        .join(",");
    let fail = |why: String| anyhow::anyhow!("cannot connect to NATS at {listed}: {why}");
    let mut addrs = Vec::with_capacity(servers.len());
    for server in &servers {
        let addr = server
            .parse::<ServerAddr>()
            .map_err(|e| fail(format!("`{}` is not a NATS URL ({e})", shown(server))))?;
        addrs.push(addr);
    }
    let options = ConnectOptions::new()
        .name(format!("agentmux {node}"))
        .no_echo()
        .connection_timeout(Duration::from_secs(10))
        .request_timeout(Some(request_timeout));
    let options = login(options, cluster, &addrs).await.map_err(fail)?;
    let options = tls(options, cluster).map_err(fail)?;
    options
        .connect(addrs)
        .await
        .map_err(|e| fail(e.to_string()))
}

/// `options` with the one login `cluster` and the servers' URLs give, if any.
async fn login(
    options: ConnectOptions,
    cluster: &ClusterConfig,
    addrs: &[ServerAddr],
) -> Result<ConnectOptions, String> {
    let mut in_urls: Vec<(String, Option<String>)> = Vec::new();
    for addr in addrs.iter().filter(|a| a.has_user_pass()) {
        let user = decoded(addr.username().unwrap_or_default())?;
        let password = addr.password().map(decoded).transpose()?;
        if !in_urls.contains(&(user.clone(), password.clone())) {
            in_urls.push((user, password));
        }
    }
    if in_urls.len() > 1 {
        return Err("the servers' URLs carry different logins; give every server the same".into());
    }
    let ways = usize::from(!in_urls.is_empty())
        + usize::from(cluster.nats_creds_file.is_some())
        + usize::from(cluster.nats_nkey_file.is_some());
    if ways > 1 {
        return Err(
            "give one way to log in to NATS: a user and password or a token in the \
                    URL, cluster.nats_creds_file, or cluster.nats_nkey_file"
                .into(),
        );
    }
    if let Some((user, password)) = in_urls.pop() {
        return Ok(match password {
            Some(password) => options.user_and_password(user, password),
            None => options.token(user),
        });
    }
    if let Some(path) = &cluster.nats_creds_file {
        return options
            .credentials_file(path)
            .await
            .map_err(|e| format!("the credentials file {} can't be used: {e}", path.display()));
    }
    if let Some(path) = &cluster.nats_nkey_file {
        let seed = std::fs::read_to_string(path)
            .map_err(|e| format!("the nkey file {} can't be read: {e}", path.display()))?;
        return Ok(options.nkey(seed.trim().to_owned()));
    }
    Ok(options)
}

/// `options` with the TLS settings of `cluster`.
fn tls(options: ConnectOptions, cluster: &ClusterConfig) -> Result<ConnectOptions, String> {
    let readable = |path: &std::path::Path| {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|e| format!("{} can't be read: {e}", path.display()))
    };
    let mut options = options.require_tls(cluster.nats_tls);
    if let Some(ca) = &cluster.nats_ca_file {
        readable(ca)?;
        options = options.add_root_certificates(ca.clone());
    }
    match (&cluster.nats_cert_file, &cluster.nats_key_file) {
        (Some(cert), Some(key)) => {
            readable(cert)?;
            readable(key)?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        (None, None) => {}
        _ => {
            return Err("cluster.nats_cert_file and cluster.nats_key_file go together".into());
        }
    }
    Ok(options)
}

/// A URL's user or password as it was meant, its percent escapes decoded.
fn decoded(text: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "a user, password or token in the URL is not UTF-8".to_owned())
}

/// A server's URL as it may be shown: a password or token replaced by `***`; a text that is
/// not a URL but holds an `@` (a mistyped one, maybe with a secret) entirely.
fn shown(server: &str) -> String {
    let Some((scheme, rest)) = server.split_once("://") else {
        return if server.contains('@') {
            "***".to_owned()
        } else {
            server.to_owned()
        };
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => format!("{scheme}://***@{host}{tail}"),
        },
        None => server.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn passwords_and_tokens_are_never_shown() {
        assert_eq!(shown("nats://a:pw@h:1"), "nats://a:***@h:1");
        assert_eq!(shown("tls://tok3n@h:1/x"), "tls://***@h:1/x");
        assert_eq!(shown("nats://h:1"), "nats://h:1");
        assert_eq!(shown("a:pw@h"), "***");
        assert_eq!(shown("h:4222"), "h:4222");
    }
}
