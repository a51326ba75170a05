//! Which push endpoints the server sends to: `https` to a public host only, checked when a
//! subscription is made and again on every connection (the resolver the sender uses drops
//! every address that is not public), so that a subscription can't make the server reach into
//! its own network. `push.allow_insecure_endpoints` lifts both checks, for tests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Longest endpoint URL accepted, in bytes.
pub(crate) const MAX_ENDPOINT_BYTES: usize = 2048;

/// Why an endpoint is refused.
pub(crate) type Refusal = String;

/// Checks an endpoint URL's form and, unless `insecure`, that it is `https` to a host that
/// resolves to public addresses only.
///
/// # Errors
/// What is wrong with it.
pub(crate) async fn check(endpoint: &str, insecure: bool) -> Result<Url, Refusal> {
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(format!(
            "`endpoint` is longer than {MAX_ENDPOINT_BYTES} bytes"
        ));
    }
    let url = Url::parse(endpoint).map_err(|e| format!("`endpoint` is not a URL: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("`endpoint` may not carry a user or password".into());
    }
    let Some(host) = url.host_str() else {
        return Err("`endpoint` has no host".into());
    };
    if insecure {
        return match url.scheme() {
            "https" | "http" => Ok(url),
            _ => Err("`endpoint` must be an https URL".into()),
        };
    }
    if url.scheme() != "https" {
        return Err("`endpoint` must be an https URL".into());
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("`endpoint`'s host does not resolve: {e}"))?
            .collect(),
    };
    if addrs.is_empty() || !addrs.iter().all(|a| is_public(a.ip())) {
        return Err(
            "`endpoint` must reach a public address (not loopback, private or link-local)".into(),
        );
    }
    Ok(url)
}

/// Whether `ip` is an address on the public internet.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        // Shared address space (carrier-grade NAT) and benchmarking.
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        // IETF protocol assignments.
        || (a == 192 && b == 0 && ip.octets()[2] == 0))
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        // Unique local, link-local, documentation, NAT64 (which maps to IPv4 we'd not check).
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
        || (first == 0x0064 && ip.segments()[1] == 0xff9b)
        // IPv4-compatible (deprecated) addresses.
        || ip.segments()[..6].iter().all(|s| *s == 0))
}

/// The sender's resolver: the system's, keeping public addresses only.
pub(crate) struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = found.filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(format!("{} has no public address", name.as_str()).into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_https_to_public_addresses_passes() {
        for refused in [
            "http://push.example/x",
            "https://127.0.0.1/x",
            "https://10.0.0.1/x",
            "https://172.16.5.4/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest",
            "https://100.64.0.1/x",
            "https://0.0.0.0/x",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://[fe80::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://localhost/x",
            "https://user:pw@8.8.8.8/x",
            "ftp://8.8.8.8/x",
            "not a url",
        ] {
            assert!(check(refused, false).await.is_err(), "{refused}");
        }
        assert!(check("https://8.8.8.8/push/abc", false).await.is_ok());
        assert!(check("https://[2606:4700::1111]/x", false).await.is_ok());
        let long = format!("https://8.8.8.8/{}", "a".repeat(MAX_ENDPOINT_BYTES));
        assert!(check(&long, false).await.is_err());
    }

    #[tokio::test]
    async fn the_test_setting_lets_loopback_and_http_through() {
        assert!(check("http://127.0.0.1:9/x", true).await.is_ok());
        assert!(check("https://[::1]/x", true).await.is_ok());
        assert!(check("ftp://127.0.0.1/x", true).await.is_err());
    }
}
