//! Where weir may listen and connect: the one place these rules live.
//!
//! Whoever can apply a rollout chooses addresses: where a local target's router listens, which
//! URLs its versions, webhooks and Prometheus servers are. Without a policy that person can open
//! a port on every interface, or make weir send requests to the cloud metadata service
//! (169.254.169.254) or to weir's own API (server-side request forgery). Two policies close
//! that, and docs/SECURITY.md ("Where weir may listen and connect") explains them to users:
//!
//! - [`ListenPolicy`]: the addresses a rollout's listeners may bind (`weir serve`: loopback
//!   only unless `--allow-listen CIDR`).
//! - [`OutboundPolicy`]: the destinations of outbound connections. weir's own listening
//!   addresses are always refused; then the most specific `--allow-connect` / `--deny-connect`
//!   rule that matches decides (a host name rule is more specific than any CIDR, a longer prefix
//!   more specific than a shorter one, and deny wins a tie); with no rule matching, link-local
//!   (169.254.0.0/16, fe80::/10) and unspecified (0.0.0.0, ::) addresses are refused and
//!   everything else is allowed.
//!
//! The outbound policy is checked twice: when a rollout is applied, on the addresses written
//! literally in it (so the mistake is a 400 naming the field), and when a connection is opened,
//! on the addresses a name resolved to (so a name that resolves - or is re-pointed - to a
//! forbidden address is refused too). The connection is then opened to exactly the address
//! checked, so DNS cannot answer differently between the check and the connect.
//!
//! CIDR parsing and matching are a few lines over `std::net`, so no crate is added for them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{PoisonError, RwLock};

/// Where users read about these rules; every refusal points there.
pub const SECURITY_DOC: &str = "docs/SECURITY.md, \"Where weir may listen and connect\"";

/// A block of IP addresses, `10.0.0.0/8` or `fe80::/10`; a bare address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `prefix` leading bits of `address` (host bits are cleared).
    pub fn new(address: IpAddr, prefix: u8) -> Result<Cidr, String> {
        let address = address.to_canonical();
        let bits = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > bits {
            return Err(format!(
                "prefix /{prefix} is longer than the address ({bits} bits)"
            ));
        }
        let network = match address {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(prefix))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(prefix))),
        };
        Ok(Cidr { network, prefix })
    }

    /// Whether `address` is in the block. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) count as
    /// the IPv4 address they carry, so a block of IPv4 addresses cannot be bypassed by writing
    /// one in IPv6 form.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                u32::from(address) & mask32(self.prefix) == u32::from(network)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                u128::from(address) & mask128(self.prefix) == u128::from(network)
            }
            _ => false,
        }
    }

    /// The prefix length (how specific the block is).
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address = address.trim_start_matches('[').trim_end_matches(']');
        let address: IpAddr = address.parse().map_err(|_| {
            format!("{text:?} is not an IP address or a CIDR block such as 10.0.0.0/8 or fe80::/10")
        })?;
        let prefix = match prefix {
            Some(prefix) => prefix
                .parse::<u8>()
                .map_err(|_| format!("{text:?}: the prefix after / must be a number of bits"))?,
            None => match address.to_canonical() {
                IpAddr::V4(_) => 32,
                IpAddr::V6(_) => 128,
            },
        };
        Cidr::new(address, prefix).map_err(|reason| format!("{text:?}: {reason}"))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// One `--allow-connect` / `--deny-connect` value: a block of addresses or a host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Addresses (matched on the address a name resolved to, or the literal address).
    Cidr(Cidr),
    /// A host name, lower case, matched exactly against the name written in the URL (not
    /// against what it resolves to). More specific than any CIDR rule.
    Host(String),
}

impl Rule {
    /// How specific the rule is: a host name above every block, then longer prefixes.
    fn rank(&self) -> u16 {
        match self {
            Rule::Host(_) => 1000,
            Rule::Cidr(cidr) => u16::from(cidr.prefix),
        }
    }

    fn matches(&self, name: Option<&str>, address: Option<IpAddr>) -> bool {
        match self {
            Rule::Host(host) => name.is_some_and(|name| normalize_host(name) == *host),
            Rule::Cidr(cidr) => address.is_some_and(|address| cidr.contains(address)),
        }
    }
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(text: &str) -> Result<Rule, String> {
        let trimmed = text.trim();
        let looks_like_address = trimmed.contains('/')
            || trimmed.contains(':')
            || trimmed.parse::<IpAddr>().is_ok()
            || trimmed.starts_with('[');
        if looks_like_address {
            return trimmed.parse().map(Rule::Cidr);
        }
        let host = normalize_host(trimmed);
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            });
        if valid {
            Ok(Rule::Host(host))
        } else {
            Err(format!(
                "{text:?} is neither a CIDR block (10.0.0.0/8, fe80::/10), an IP address nor a host name (prometheus.internal)"
            ))
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Cidr(cidr) => cidr.fmt(f),
            Rule::Host(host) => f.write_str(host),
        }
    }
}

/// A host name as compared: lower case, without a trailing dot, without IPv6 brackets.
fn normalize_host(host: &str) -> String {
    host.trim()
        .trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Why a destination or a listen address is refused, in words that name the setting that would
/// allow it and point to docs/SECURITY.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    message: String,
}

impl Refusal {
    fn new(message: String) -> Refusal {
        Refusal {
            message: format!("{message} (see {SECURITY_DOC})"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// The destinations weir may open connections to on behalf of rollouts: version URLs (the
/// router's upstreams and their health checks), webhooks, notifications and Prometheus servers.
/// The rules are in the module documentation.
#[derive(Debug, Default)]
pub struct OutboundPolicy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    /// weir's own listening addresses (its API, its metrics listener): never a destination, so
    /// a rollout cannot make weir drive weir. Added once bound (port 0 is known only then).
    own: RwLock<Vec<SocketAddr>>,
}

impl OutboundPolicy {
    /// The default policy with `allow` and `deny` rules added (`--allow-connect`,
    /// `--deny-connect`).
    pub fn new(allow: Vec<Rule>, deny: Vec<Rule>) -> OutboundPolicy {
        OutboundPolicy {
            allow,
            deny,
            own: RwLock::default(),
        }
    }

    /// Adds one of weir's own listening addresses (refused as a destination from now on).
    pub fn add_own(&self, address: SocketAddr) {
        self.own
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(address);
    }

    /// Whether a connection to `address` may be opened; `name` is the host name the URL gave,
    /// if it gave one (it is matched by host name rules, and named in the refusal).
    pub fn check(&self, name: Option<&str>, address: SocketAddr) -> Result<(), Refusal> {
        let ip = address.ip().to_canonical();
        let destination = match name {
            Some(name) if name.parse::<IpAddr>().is_err() => format!("{name} ({address})"),
            _ => address.to_string(),
        };
        if let Some(own) = self.own_address(SocketAddr::new(ip, address.port())) {
            return Err(Refusal::new(format!(
                "{destination} is refused by weir's outbound policy: it is weir's own listener {own}, and a rollout may not make weir send requests to weir (this is not configurable)"
            )));
        }
        match self.decide(name, Some(ip)) {
            Some((_, true)) => return Ok(()),
            Some((rule, false)) => {
                return Err(Refusal::new(format!(
                    "{destination} is refused by weir's outbound policy: --deny-connect {rule} matches it (a more specific --allow-connect admits it)"
                )));
            }
            None => {}
        }
        if is_link_local(ip) {
            return Err(Refusal::new(format!(
                "{destination} is refused by weir's outbound policy: {ip} is a link-local address (169.254.0.0/16, fe80::/10, where cloud metadata services answer), refused by default; start weir with --allow-connect {ip} to allow it"
            )));
        }
        if ip.is_unspecified() {
            return Err(Refusal::new(format!(
                "{destination} is refused by weir's outbound policy: {ip} is the unspecified address (it reaches this host on any port), refused by default; start weir with --allow-connect {ip} to allow it"
            )));
        }
        Ok(())
    }

    /// The check made when a rollout is applied, on a URL's host and port as written: a literal
    /// address is checked as [`OutboundPolicy::check`] would; a name only against host name
    /// rules (what it resolves to is checked when a connection is opened).
    pub fn check_host(&self, host: &str, port: u16) -> Result<(), Refusal> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check(None, SocketAddr::new(ip, port));
        }
        match self.decide(Some(host), None) {
            Some((rule, false)) => Err(Refusal::new(format!(
                "{host} is refused by weir's outbound policy: --deny-connect {rule} matches it"
            ))),
            _ => Ok(()),
        }
    }

    /// [`OutboundPolicy::check_host`] for an `http://` or `https://` URL (or a bare
    /// `HOST:PORT`); a URL without a host is left to whoever parses it.
    pub fn check_url(&self, url: &str) -> Result<(), Refusal> {
        let Ok(uri) = url.trim().parse::<http::Uri>() else {
            return Ok(());
        };
        let Some(host) = uri.host() else {
            return Ok(());
        };
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        self.check_host(host, port)
    }

    /// The most specific user rule matching, and whether it allows.
    fn decide(&self, name: Option<&str>, address: Option<IpAddr>) -> Option<(&Rule, bool)> {
        let allows = self.allow.iter().map(|rule| (rule, true));
        let denies = self.deny.iter().map(|rule| (rule, false));
        allows
            .chain(denies)
            .filter(|(rule, _)| rule.matches(name, address))
            // Deny wins a tie: (rank, deny) compares greater for a deny of the same rank.
            .max_by_key(|(rule, allow)| (rule.rank(), !allow))
    }

    /// The own listening address `address` would reach, if any.
    fn own_address(&self, address: SocketAddr) -> Option<SocketAddr> {
        let own = self.own.read().unwrap_or_else(PoisonError::into_inner);
        let ip = address.ip();
        let local = |ip: IpAddr| ip.is_loopback() || ip.is_unspecified();
        own.iter().copied().find(|own| {
            let own_ip = own.ip().to_canonical();
            own.port() == address.port()
                && (own_ip == ip
                    || (local(own_ip) && local(ip))
                    || (own_ip.is_unspecified() && is_this_hosts(ip)))
        })
    }
}

/// Whether `ip` is one of this host's addresses: only those can be bound.
fn is_this_hosts(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// The addresses rollouts may ask weir to listen on (a local target's `spec.target.listen`).
#[derive(Debug, Clone, Default)]
pub struct ListenPolicy {
    /// `None`: any address (`weir run`, whose rollout is the person's own file).
    allowed: Option<Vec<Cidr>>,
}

impl ListenPolicy {
    /// Any address.
    pub fn any() -> ListenPolicy {
        ListenPolicy { allowed: None }
    }

    /// Loopback addresses only (127.0.0.0/8, ::1): `weir serve`'s default.
    pub fn loopback_only() -> ListenPolicy {
        ListenPolicy {
            allowed: Some(vec![
                Cidr {
                    network: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
                    prefix: 8,
                },
                Cidr {
                    network: IpAddr::V6(Ipv6Addr::LOCALHOST),
                    prefix: 128,
                },
            ]),
        }
    }

    /// The same policy also admitting `block` (`--allow-listen`).
    pub fn allow(mut self, block: Cidr) -> ListenPolicy {
        if let Some(allowed) = &mut self.allowed {
            allowed.push(block);
        }
        self
    }

    /// Whether a listener may bind `listen`. The unspecified address (0.0.0.0, ::) is every
    /// interface, so only a block containing it (`0.0.0.0/0`, `::/0`) admits it.
    pub fn check(&self, listen: SocketAddr) -> Result<(), Refusal> {
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        if allowed.iter().any(|block| block.contains(listen.ip())) {
            return Ok(());
        }
        let admitted: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        let suggestion = match listen.ip().to_canonical() {
            ip if ip.is_unspecified() && ip.is_ipv4() => "0.0.0.0/0".to_string(),
            ip if ip.is_unspecified() => "::/0".to_string(),
            ip => format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }),
        };
        Err(Refusal::new(format!(
            "this server does not let rollouts listen on {listen}: it admits {} only; start weir serve with --allow-listen {suggestion} to allow it",
            admitted.join(", ")
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
