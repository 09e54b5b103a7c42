//! Which addresses a fetch must not reach by default: every special-use range (IANA's
//! registries) and the host's own addresses; and the resolver that drops them, so a name
//! cannot rebind to one between check and connect.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// True for addresses a fetch must not reach by default: every special-use range (IANA's
/// registries) and the host's own addresses.
pub fn is_private(ip: IpAddr) -> bool {
    special(ip) || is_own_address(ip)
}

fn special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return special_v4(v4);
            }
            let s = v6.segments();
            let embedded_v4 = |hi: u16, lo: u16| {
                Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
                || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated)
                || (s[0] & 0xff00) == 0xff00 // multicast
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments, Teredo
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64: judged by the embedded v4 too
                    && special_v4(embedded_v4(s[6], s[7]))
                || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64
                || (s[0] == 0x2002 && special_v4(embedded_v4(s[1], s[2]))) // 6to4
                || s[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible (deprecated)
        }
    }
}

fn special_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 198 && (b & 0xfe) == 18) // benchmarking
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224 // multicast and reserved
}

/// True when `ip` is one of this host's own addresses (binding to it succeeds), e.g. its
/// public interface address, which reaches services listening on all interfaces.
fn is_own_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

pub fn url_names_private_ip(url: &reqwest::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => is_private(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => is_private(IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost")
        }
        None => true,
    }
}

/// A resolver that returns only public addresses.
pub(super) struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| !is_private(a.ip())).collect();
            if public.is_empty() {
                return Err(
                    format!("{host} resolves only to private or loopback addresses").into(),
                );
            }
            let iter: Addrs = Box::new(public.into_iter());
            Ok(iter)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_recognised() {
        for ip in [
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
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.254",
            "198.51.100.7",
            "203.0.113.9",
            "192.0.0.8",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "ff02::1",
            "2001:db8::1",
            "64:ff9b::a00:1",
            "64:ff9b::7f00:1",
            "2002:a00:1::",
            "2002:7f00:1::",
            "::127.0.0.1",
            "100::1",
            "fec0::1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "198.20.0.1",
        ] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_hosts_own_addresses_are_refused() {
        // Whatever interface address this machine has (found by routing towards a public
        // address; no packet is sent), it is refused like loopback.
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        probe.connect("8.8.8.8:53").unwrap();
        let own = probe.local_addr().unwrap().ip();
        assert!(is_own_address(own), "{own}");
        assert!(is_private(own), "{own}");
        assert!(!is_own_address("8.8.8.8".parse().unwrap()));
    }
}
