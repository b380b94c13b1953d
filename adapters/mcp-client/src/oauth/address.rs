//! Where OAuth requests may go (UC-1): a server's metadata can name any URL, so its metadata,
//! registration and token endpoints must not resolve to this machine or the internal network
//! unless the server's configuration allows it. The address checked is the one connected to.

use std::net::{IpAddr, SocketAddr};

use quarry_domain::sanitize_label;
use quarry_ports::OAuthFailure;

/// True for addresses a public endpoint never has: loopback, private, link-local, shared
/// (CGNAT), unique-local, unspecified, multicast, documentation, and IPv4 mapped into IPv6.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// The address to connect to for `url`: the first its host resolves to, refused when it is
/// internal and `allow_internal` is false (every address the name has is checked, so a name
/// with one public and one internal address is refused too).
pub(crate) async fn resolve(
    url: &reqwest::Url,
    allow_internal: bool,
) -> Result<(String, SocketAddr), OAuthFailure> {
    let host = url
        .host_str()
        .ok_or_else(|| {
            OAuthFailure::Unavailable(format!("{} has no host", sanitize_label(url.as_str())))
        })?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| {
            OAuthFailure::Unavailable(format!("cannot resolve {}: {e}", sanitize_label(&host)))
        })?
        .collect();
    let first = *addresses.first().ok_or_else(|| {
        OAuthFailure::Unavailable(format!("{} resolves to no address", sanitize_label(&host)))
    })?;
    if !allow_internal && let Some(internal) = addresses.iter().find(|a| is_internal(a.ip())) {
        return Err(OAuthFailure::Unavailable(format!(
            "{} resolves to {}, an internal address: OAuth endpoints there are refused unless the \
             server's configuration sets oauth_allow_private_network = true",
            sanitize_label(url.as_str()),
            internal.ip()
        )));
    }
    Ok((host, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_told_from_public_ones() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "100.128.0.1"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
