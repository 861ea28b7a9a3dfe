//! A network namespace per lease, and the nftables filter that lets it reach only what its
//! egress allow-list permits.
//!
//! Why a namespace and not systemd's `IPAddressAllow=`: `IPAddressDeny=any` also blocks the
//! job's own loopback (multi-process training needs it), and allowing 127.0.0.0/8 would expose
//! the host's loopback services (see `shared/notes/isolation.md`, "Egress"). In its own
//! namespace a job has a private loopback and one way out: a veth pair to the host, whose host
//! side is filtered in the forward hook by hostd's table `inet sovereign_host`.
//!
//! Layout of the table (base chains hold only static rules, so re-declaring them is idempotent;
//! everything per lease is a named object found from the lease id, so [`Firewall::remove`] and
//! [`Firewall::list`] need no rule handles and no state of their own):
//! - `forward` (policy accept for the host's other traffic): traffic from one lease veth to
//!   another is dropped first (an `accept` in the sender's chain would otherwise be final, and
//!   an allow-everything list would open other tenants' leases); then a packet from or to a
//!   lease veth (`svh*`) jumps to that lease's chain through the verdict maps
//!   `out_dispatch`/`in_dispatch`; whatever the lease chain does not accept is dropped, and so
//!   is any `svh*` traffic whose lease has no chain (fail closed).
//! - `lease_out_<lease>`: from the lease's own address to a destination in the interval set
//!   `allow_<lease>`, counted in counter `out_<lease>`, accepted.
//! - `lease_in_<lease>`: established/related return traffic to the lease address, counted in
//!   `in_<lease>`. Nothing outside can open a connection into a lease (published ports are
//!   forwarded in userspace from the host, see [`super::publish`]).
//! - `input`: from a lease veth only return traffic of connections the host opened (the
//!   published-port forwarder); hostd's API and every other host service are unreachable.
//! - `postrouting`: traffic from the address pools leaving through a non-lease interface is
//!   masqueraded, so the outside needs no route back to the pool.
//!
//! IPv4 only: a lease has no IPv6 address and the `svh*` drop rules cover IPv6 as well (the
//! table is `inet`). Forwarding: hostd never sets the global `net.ipv4.ip_forward`; it turns
//! on `net.ipv4.conf.<if>.forwarding` for each lease's host veth and for the configured
//! uplinks only, because the kernel checks that flag on the interface a packet came in on.

use attest::report::report;
use policy::{Cidr, EgressAllowList};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// hostd's one nftables table.
pub const TABLE: &str = "sovereign_host";
/// Prefix of every lease's host-side veth; the table's catch-all drop rules match on it.
pub const HOST_IF_PREFIX: &str = "svh";
/// Prefix of every lease's namespace name (under `/run/netns`).
pub const NETNS_PREFIX: &str = "sov-";
/// Name of the lease side of the veth, inside the lease's namespace.
pub const LEASE_IF: &str = "eth0";
/// Longest lease id accepted: names derived from it must stay usable as nft identifiers and
/// netns names, and the namespace path must be short enough to read in a log.
pub const MAX_LEASE_ID: usize = 48;
/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";

/// Why a lease's network could not be set up, changed, read or removed. Messages are for the
/// operator's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    #[error("lease id {lease:?} is not 1-{MAX_LEASE_ID} characters of [A-Za-z0-9_-]")]
    InvalidLease { lease: String },
    #[error("address pool {pool} is not an IPv4 prefix of length 8-30 without host bits")]
    BadPool { pool: String },
    #[error("all /30 networks of the pool {pool} are in use")]
    PoolExhausted { pool: String },
    #[error("lease {lease} already has a network namespace")]
    AlreadyExists { lease: String },
    #[error("lease {lease} has no network (counters {what} missing)")]
    NotFound { lease: String, what: String },
    #[error("cannot run `{command}`")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot parse the output of `{command}`")]
    Parse {
        command: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {path}")]
    Sysctl {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the host's resolvers from {path}")]
    ResolvConf {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list {path}")]
    ListNamespaces {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A lease's network as the job and the node see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseNetwork {
    /// The lease it belongs to.
    pub lease: String,
    /// The namespace's name for `ip netns` (`sov-<lease>`).
    pub netns: String,
    /// The path the job's unit joins with `NetworkNamespacePath=`.
    pub netns_path: PathBuf,
    /// Host side of the veth (in the host's namespace, at most 15 characters).
    pub host_if: String,
    /// Lease side of the veth (inside the namespace).
    pub lease_if: String,
    /// The host side's address: the lease's default gateway.
    pub host_addr: Ipv4Addr,
    /// The lease's address: where published ports connect to.
    pub lease_addr: Ipv4Addr,
    /// Prefix length of the point-to-point network (30).
    pub prefix_len: u8,
}

/// Bytes a lease sent out and received back through its filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    /// Accepted bytes from the lease to allowed destinations (IP packet lengths).
    pub out: u64,
    /// Return bytes to the lease.
    pub in_: u64,
}

/// What exists of one lease on this host, as found by [`Firewall::list`] after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingLease {
    /// The lease id, recovered from the names.
    pub lease: String,
    /// Its namespace exists.
    pub netns: bool,
    /// Its chains exist in hostd's table.
    pub rules: bool,
    /// Its network, when the host veth still has its address.
    pub network: Option<LeaseNetwork>,
}

/// The side-effect interface for lease networks: the real [`NftFirewall`] drives `ip` and
/// `nft`; [`MemFirewall`] records calls for callers' tests.
pub trait Firewall: Send + Sync {
    /// Makes the lease's namespace, veth pair and filter; on failure nothing is left behind.
    fn create(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> impl Future<Output = Result<LeaseNetwork, EgressError>> + Send;

    /// Replaces the lease's allow set with `allow` in one atomic `nft` transaction.
    fn update(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> impl Future<Output = Result<(), EgressError>> + Send;

    /// Reads the lease's byte counters.
    fn counters(&self, lease: &str) -> impl Future<Output = Result<Bytes, EgressError>> + Send;

    /// Deletes everything of the lease (namespace, veth, set, chains, counters); removing what
    /// is already gone is not an error.
    fn remove(&self, lease: &str) -> impl Future<Output = Result<(), EgressError>> + Send;

    /// What namespaces and rules of hostd's exist, for re-adoption after a restart.
    fn list(&self) -> impl Future<Output = Result<Vec<ExistingLease>, EgressError>> + Send;
}

/// A shared firewall is a firewall (a test keeps a handle on the fake it gave the controller).
impl<F: Firewall> Firewall for std::sync::Arc<F> {
    fn create(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> impl Future<Output = Result<LeaseNetwork, EgressError>> + Send {
        (**self).create(lease, allow)
    }

    fn update(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> impl Future<Output = Result<(), EgressError>> + Send {
        (**self).update(lease, allow)
    }

    fn counters(&self, lease: &str) -> impl Future<Output = Result<Bytes, EgressError>> + Send {
        (**self).counters(lease)
    }

    fn remove(&self, lease: &str) -> impl Future<Output = Result<(), EgressError>> + Send {
        (**self).remove(lease)
    }

    fn list(&self) -> impl Future<Output = Result<Vec<ExistingLease>, EgressError>> + Send {
        (**self).list()
    }
}

/// Checks a lease id: names of namespaces, interfaces and nft objects are derived from it, so
/// it must not carry anything a command line or an nft script would read as syntax.
pub fn validate_lease(lease: &str) -> Result<(), EgressError> {
    if super::is_plain_name(lease, MAX_LEASE_ID) {
        Ok(())
    } else {
        Err(EgressError::InvalidLease {
            lease: lease.to_owned(),
        })
    }
}

/// Every name a lease's network uses, derived from the lease id alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Namespace name.
    pub netns: String,
    /// Host-side veth: `svh` and 12 hex digits of SHA-256(lease), because interface names
    /// are limited to 15 characters and lease ids are not.
    pub host_if: String,
    /// Chain for traffic from the lease.
    pub chain_out: String,
    /// Chain for traffic to the lease.
    pub chain_in: String,
    /// Interval set of allowed IPv4 prefixes.
    pub set: String,
    /// Counter of bytes out.
    pub counter_out: String,
    /// Counter of bytes in.
    pub counter_in: String,
}

impl Names {
    /// The names for a validated lease id.
    pub fn of(lease: &str) -> Result<Names, EgressError> {
        validate_lease(lease)?;
        let digest = Sha256::digest(lease.as_bytes());
        Ok(Names {
            netns: format!("{NETNS_PREFIX}{lease}"),
            host_if: format!("{HOST_IF_PREFIX}{}", &hex::encode(digest)[..12]),
            chain_out: format!("lease_out_{lease}"),
            chain_in: format!("lease_in_{lease}"),
            set: format!("allow_{lease}"),
            counter_out: format!("out_{lease}"),
            counter_in: format!("in_{lease}"),
        })
    }

    /// The namespace's path.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.netns)
    }
}

/// The IPv4 pool lease networks come from, one /30 each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Pool {
    base: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Pool {
    /// A pool over `base/prefix`; `prefix` 8-30 (at least one /30, at most 2^22 of them).
    pub fn new(base: Ipv4Addr, prefix: u8) -> Result<Ipv4Pool, EgressError> {
        let bad = || EgressError::BadPool {
            pool: format!("{base}/{prefix}"),
        };
        if !(8..=30).contains(&prefix) {
            return Err(bad());
        }
        if u32::from(base) & !(u32::MAX << (32 - prefix)) != 0 {
            return Err(bad());
        }
        Ok(Ipv4Pool { base, prefix })
    }

    /// How many /30 networks it holds.
    pub fn slots(&self) -> u32 {
        1 << (30 - self.prefix)
    }

    /// Host and lease addresses of slot `i` (the first two usable addresses of its /30).
    pub fn slot(&self, i: u32) -> (Ipv4Addr, Ipv4Addr) {
        let net = u32::from(self.base) + i * 4;
        (Ipv4Addr::from(net + 1), Ipv4Addr::from(net + 2))
    }

    /// Whether `a` is in the pool.
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix);
        u32::from(a) & mask == u32::from(self.base)
    }

    /// The lowest slot whose addresses no one in `used` holds.
    pub fn allocate(&self, used: &BTreeSet<Ipv4Addr>) -> Result<u32, EgressError> {
        (0..self.slots())
            .find(|i| !used.contains(&self.slot(*i).0))
            .ok_or_else(|| EgressError::PoolExhausted {
                pool: self.to_string(),
            })
    }
}

impl std::fmt::Display for Ipv4Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// How the real firewall is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConfig {
    /// Where lease networks come from.
    pub pool: Ipv4Pool,
    /// Interfaces allowed traffic leaves through; forwarding is switched on for them.
    pub uplinks: Vec<String>,
}

impl Default for FirewallConfig {
    /// `10.231.0.0/16` (16384 leases), no uplinks.
    fn default() -> Self {
        FirewallConfig {
            pool: Ipv4Pool {
                base: Ipv4Addr::new(10, 231, 0, 0),
                prefix: 16,
            },
            uplinks: Vec::new(),
        }
    }
}

/// The allow-list's IPv4 prefixes with those inside another removed, because an interval set
/// refuses overlapping elements.
pub fn allowed_v4(allow: &EgressAllowList) -> Vec<Cidr> {
    let all: Vec<Cidr> = allow.ipv4().copied().collect();
    all.iter()
        .filter(|c| !all.iter().any(|o| o != *c && o.covers(c)))
        .copied()
        .collect()
}

/// The `resolv.conf` a lease gets: the host's IPv4 resolvers that its allow-list permits
/// (loopback resolvers are useless inside the namespace, IPv6 is not routed), or a file that
/// says name resolution is not permitted.
pub fn resolv_conf(host_resolv_conf: &str, allow: &EgressAllowList) -> String {
    let servers: Vec<Ipv4Addr> = host_resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .filter_map(|w| w.parse::<Ipv4Addr>().ok())
        .filter(|a| !a.is_loopback() && allow.permits(IpAddr::V4(*a)))
        .collect();
    if servers.is_empty() {
        return "# Name resolution is not permitted: the lease's egress policy allows none of \
                this host's resolvers.\n"
            .to_owned();
    }
    let mut out = "# The host's resolvers that the lease's egress policy allows.\n".to_owned();
    for s in servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    out
}

/// The lease's `resolv.conf` from this host's `/etc/resolv.conf` (see [`resolv_conf`]).
pub async fn lease_resolv_conf(allow: &EgressAllowList) -> Result<String, EgressError> {
    resolv_conf_from(Path::new("/etc/resolv.conf"), allow).await
}

/// A host without `resolv.conf` (the image has none: it resolves no names) has no resolvers
/// to offer; any other failure to read it is an error.
async fn resolv_conf_from(path: &Path, allow: &EgressAllowList) -> Result<String, EgressError> {
    let host = match tokio::fs::read_to_string(path).await {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(EgressError::ResolvConf {
                path: path.display().to_string(),
                source,
            })
        }
    };
    Ok(resolv_conf(&host, allow))
}

/// The set definition; `remove` re-declares it, so it must match `lease_script`'s exactly.
fn set_decl(n: &Names) -> String {
    format!(
        "add set inet {TABLE} {} {{ type ipv4_addr; flags interval; auto-merge; }}\n",
        n.set
    )
}

/// The table's static part, re-declared before every lease change (idempotent: base chains
/// are flushed and refilled in the same transaction). `leases4` holds the live leases'
/// addresses, whose traffic leaving the node is masqueraded. It holds addresses, not the
/// pool: an interval set of pools made a node whose pool changed, or a firewall beside
/// another one's leftover table (the tests'), fail its first lease with "interval overlaps".
pub fn base_script() -> String {
    let t = format!("inet {TABLE}");
    let h = format!("\"{HOST_IF_PREFIX}*\"");
    format!(
        "add table {t}\n\
         add map {t} out_dispatch {{ type ifname : verdict; }}\n\
         add map {t} in_dispatch {{ type ifname : verdict; }}\n\
         add set {t} leases4 {{ type ipv4_addr; }}\n\
         add chain {t} forward {{ type filter hook forward priority filter; policy accept; }}\n\
         add chain {t} input {{ type filter hook input priority filter; policy accept; }}\n\
         add chain {t} postrouting {{ type nat hook postrouting priority srcnat; policy accept; }}\n\
         flush chain {t} forward\n\
         flush chain {t} input\n\
         flush chain {t} postrouting\n\
         add rule {t} forward iifname {h} oifname {h} drop\n\
         add rule {t} forward iifname {h} iifname vmap @out_dispatch\n\
         add rule {t} forward oifname {h} oifname vmap @in_dispatch\n\
         add rule {t} forward iifname {h} drop\n\
         add rule {t} forward oifname {h} drop\n\
         add rule {t} input iifname {h} ct state established,related accept\n\
         add rule {t} input iifname {h} drop\n\
         add rule {t} postrouting ip saddr @leases4 oifname != {h} masquerade\n"
    )
}

/// A lease's set, counters, chains and dispatch entries.
pub fn lease_script(n: &Names, lease_addr: Ipv4Addr) -> String {
    let t = format!("inet {TABLE}");
    let mut s = set_decl(n);
    s.push_str(&format!(
        "add counter {t} {out}\n\
         add counter {t} {inn}\n\
         add chain {t} {co}\n\
         add chain {t} {ci}\n\
         flush chain {t} {co}\n\
         flush chain {t} {ci}\n\
         add rule {t} {co} ip saddr {lease_addr} ip daddr @{set} counter name \"{out}\" accept\n\
         add rule {t} {ci} ip daddr {lease_addr} ct state established,related \
         counter name \"{inn}\" accept\n\
         add element {t} out_dispatch {{ \"{h}\" : jump {co} }}\n\
         add element {t} in_dispatch {{ \"{h}\" : jump {ci} }}\n\
         add element {t} leases4 {{ {lease_addr} }}\n",
        out = n.counter_out,
        inn = n.counter_in,
        co = n.chain_out,
        ci = n.chain_in,
        set = n.set,
        h = n.host_if,
    ));
    s
}

/// Replaces the allow set's elements (part of one transaction with whatever precedes it).
pub fn allow_script(n: &Names, allow: &EgressAllowList) -> String {
    let mut s = format!("flush set inet {TABLE} {}\n", n.set);
    let v4 = allowed_v4(allow);
    if !v4.is_empty() {
        let elems: Vec<String> = v4.iter().map(Cidr::to_string).collect();
        s.push_str(&format!(
            "add element inet {TABLE} {} {{ {} }}\n",
            n.set,
            elems.join(", ")
        ));
    }
    s
}

/// Deletes a lease's objects, and its address from `leases4` where it is known. Each is
/// declared first, so the transaction succeeds whether or not it still exists (nftables 1.0.6
/// has no `destroy`), which makes `remove` idempotent.
pub fn remove_script(n: &Names, lease_addr: Option<Ipv4Addr>) -> String {
    let t = format!("inet {TABLE}");
    let mut s = format!(
        "add table {t}\n\
         add map {t} out_dispatch {{ type ifname : verdict; }}\n\
         add map {t} in_dispatch {{ type ifname : verdict; }}\n\
         add chain {t} {co}\n\
         add chain {t} {ci}\n\
         add element {t} out_dispatch {{ \"{h}\" : jump {co} }}\n\
         add element {t} in_dispatch {{ \"{h}\" : jump {ci} }}\n\
         delete element {t} out_dispatch {{ \"{h}\" }}\n\
         delete element {t} in_dispatch {{ \"{h}\" }}\n\
         flush chain {t} {co}\n\
         delete chain {t} {co}\n\
         flush chain {t} {ci}\n\
         delete chain {t} {ci}\n",
        co = n.chain_out,
        ci = n.chain_in,
        h = n.host_if,
    );
    s.push_str(&set_decl(n));
    s.push_str(&format!(
        "delete set {t} {set}\n\
         add counter {t} {out}\n\
         delete counter {t} {out}\n\
         add counter {t} {inn}\n\
         delete counter {t} {inn}\n",
        set = n.set,
        out = n.counter_out,
        inn = n.counter_in,
    ));
    if let Some(a) = lease_addr {
        s.push_str(&format!(
            "add set {t} leases4 {{ type ipv4_addr; }}\n\
             add element {t} leases4 {{ {a} }}\n\
             delete element {t} leases4 {{ {a} }}\n"
        ));
    }
    s
}

/// Runs `program args`, feeding `stdin` if given; a non-zero exit is an error carrying the
/// command line and its stderr.
///
/// The child gets a process group of its own: Ctrl-C at the terminal of a `hostd dev` signals
/// the terminal's whole foreground group, and an `ip` or `nft` killed by it half way through
/// the shutdown's cleanup would leave a lease's namespace or rules behind. hostd alone decides
/// when its children stop (`kill_on_drop`).
pub(crate) async fn run(
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, EgressError> {
    let command = format!("{program} {}", args.join(" "));
    let spawn_err = |source| EgressError::Spawn {
        command: command.clone(),
        source,
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(spawn_err)?;
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).await.map_err(spawn_err)?;
        }
    }
    let out = child.wait_with_output().await.map_err(spawn_err)?;
    if !out.status.success() {
        return Err(EgressError::Command {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Applies an nft script as one transaction.
async fn nft(script: &str) -> Result<(), EgressError> {
    run("nft", &["-f", "-"], Some(script)).await.map(drop)
}

/// Sets `net.ipv4.conf.<iface>.forwarding` to 1.
async fn enable_forwarding(iface: &str) -> Result<(), EgressError> {
    let path = format!("/proc/sys/net/ipv4/conf/{iface}/forwarding");
    tokio::fs::write(&path, b"1")
        .await
        .map_err(|source| EgressError::Sysctl { path, source })
}

/// Reads a JSON document from a command.
fn parse_json(command: &str, text: &str) -> Result<Value, EgressError> {
    serde_json::from_str(text).map_err(|source| EgressError::Parse {
        command: command.to_owned(),
        source,
    })
}

/// The byte count of each named counter in `nft -j list counters` output.
pub fn parse_counters(json: &Value) -> BTreeMap<String, u64> {
    nft_objects(json, "counter")
        .filter_map(|c| {
            Some((
                c.get("name")?.as_str()?.to_owned(),
                c.get("bytes")?.as_u64()?,
            ))
        })
        .collect()
}

/// The `kind` objects (e.g. `chain`, `counter`) of hostd's table in `nft -j` output.
fn nft_objects<'a>(json: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    json.get("nftables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(move |o| o.get(kind))
        .filter(|o| o.get("table").and_then(Value::as_str) == Some(TABLE))
}

/// Whether `nft` failed because hostd's table does not exist (yet, or any more).
fn no_table(e: &EgressError) -> bool {
    matches!(e, EgressError::Command { stderr, .. } if stderr.contains("No such file or directory"))
}

/// The real firewall: `ip` and `nft` on this host.
#[derive(Debug)]
pub struct NftFirewall {
    config: FirewallConfig,
    /// Live lease networks: which pool addresses are taken.
    leases: Mutex<BTreeMap<String, LeaseNetwork>>,
}

/// What a `create` has made so far, so a failure undoes exactly that.
#[derive(Debug, Default)]
struct Made {
    rules: bool,
    netns: bool,
    veth: bool,
}

impl NftFirewall {
    /// A firewall that adopts the lease networks already on this host (after a restart), so
    /// their addresses are not handed out twice.
    pub async fn adopt(config: FirewallConfig) -> Result<NftFirewall, EgressError> {
        let fw = NftFirewall {
            config,
            leases: Mutex::new(BTreeMap::new()),
        };
        let found = fw.list().await?;
        let mut leases = fw.leases.lock().unwrap_or_else(PoisonError::into_inner);
        for net in found.into_iter().filter_map(|e| e.network) {
            tracing::info!(lease = %net.lease, addr = %net.lease_addr, "adopted lease network");
            leases.insert(net.lease.clone(), net);
        }
        drop(leases);
        Ok(fw)
    }

    /// Reserves the lowest free /30 for `lease`.
    fn reserve(&self, lease: &str, n: &Names) -> Result<LeaseNetwork, EgressError> {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if leases.contains_key(lease) || n.netns_path().exists() {
            return Err(EgressError::AlreadyExists {
                lease: lease.to_owned(),
            });
        }
        let used: BTreeSet<Ipv4Addr> = leases.values().map(|l| l.host_addr).collect();
        let slot = self.config.pool.allocate(&used)?;
        let (host_addr, lease_addr) = self.config.pool.slot(slot);
        let net = LeaseNetwork {
            lease: lease.to_owned(),
            netns: n.netns.clone(),
            netns_path: n.netns_path(),
            host_if: n.host_if.clone(),
            lease_if: LEASE_IF.to_owned(),
            host_addr,
            lease_addr,
            prefix_len: 30,
        };
        leases.insert(lease.to_owned(), net.clone());
        Ok(net)
    }

    /// The address of a lease this firewall made or adopted.
    fn leased_addr(&self, lease: &str) -> Option<Ipv4Addr> {
        let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases.get(lease).map(|net| net.lease_addr)
    }

    fn release(&self, lease: &str) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases.remove(lease);
    }

    /// The steps of `create`, recording in `made` what exists so far. The filter goes in
    /// first, so the veth never carries a packet unfiltered.
    async fn build(
        &self,
        n: &Names,
        net: &LeaseNetwork,
        allow: &EgressAllowList,
        made: &mut Made,
    ) -> Result<(), EgressError> {
        let mut script = base_script();
        script.push_str(&lease_script(n, net.lease_addr));
        script.push_str(&allow_script(n, allow));
        nft(&script).await?;
        made.rules = true;
        run("ip", &["netns", "add", &n.netns], None).await?;
        made.netns = true;
        let h = n.host_if.as_str();
        let peer = ["link", "add", h, "type", "veth", "peer", "name", LEASE_IF];
        run("ip", &[&peer[..], &["netns", &n.netns]].concat(), None).await?;
        made.veth = true;
        let host_cidr = format!("{}/{}", net.host_addr, net.prefix_len);
        run("ip", &["addr", "add", &host_cidr, "dev", h], None).await?;
        enable_forwarding(h).await?;
        for uplink in &self.config.uplinks {
            enable_forwarding(uplink).await?;
        }
        run("ip", &["link", "set", h, "up"], None).await?;
        self.configure_inside(n, net).await
    }

    /// Address, links and default route inside the namespace.
    async fn configure_inside(&self, n: &Names, net: &LeaseNetwork) -> Result<(), EgressError> {
        let lease_cidr = format!("{}/{}", net.lease_addr, net.prefix_len);
        let gw = net.host_addr.to_string();
        let ns = n.netns.as_str();
        run(
            "ip",
            &["-n", ns, "addr", "add", &lease_cidr, "dev", LEASE_IF],
            None,
        )
        .await?;
        run("ip", &["-n", ns, "link", "set", "lo", "up"], None).await?;
        run("ip", &["-n", ns, "link", "set", LEASE_IF, "up"], None).await?;
        run(
            "ip",
            &["-n", ns, "route", "add", "default", "via", &gw],
            None,
        )
        .await?;
        Ok(())
    }

    /// Undoes what `made` says exists (best effort: the first error is the one reported).
    async fn undo(&self, lease: &str, n: &Names, net: &LeaseNetwork, made: &Made) {
        if made.veth {
            if let Err(e) = run("ip", &["link", "del", &n.host_if], None).await {
                tracing::warn!(lease, error = %report(&e), "rollback: veth not deleted");
            }
        }
        if made.netns {
            if let Err(e) = run("ip", &["netns", "del", &n.netns], None).await {
                tracing::warn!(lease, error = %report(&e), "rollback: namespace not deleted");
            }
        }
        if made.rules {
            if let Err(e) = nft(&remove_script(n, Some(net.lease_addr))).await {
                tracing::warn!(lease, error = %report(&e), "rollback: rules not deleted");
            }
        }
    }

    /// The host veth's IPv4 address, if it exists and has one from the pool.
    async fn host_addr(&self, host_if: &str) -> Option<Ipv4Addr> {
        let text = run("ip", &["-j", "-4", "addr", "show", "dev", host_if], None)
            .await
            .ok()?;
        let json: Value = serde_json::from_str(&text).ok()?;
        let addrs = json.get(0)?.get("addr_info")?.as_array()?;
        addrs
            .iter()
            .filter_map(|a| a.get("local")?.as_str()?.parse::<Ipv4Addr>().ok())
            .find(|a| self.config.pool.contains(*a))
    }

    /// Lease ids with a namespace here.
    fn namespaces() -> Result<BTreeSet<String>, EgressError> {
        let entries = match std::fs::read_dir(NETNS_DIR) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(source) => {
                return Err(EgressError::ListNamespaces {
                    path: NETNS_DIR.to_owned(),
                    source,
                })
            }
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_prefix(NETNS_PREFIX).map(str::to_owned))
            .filter(|l| validate_lease(l).is_ok())
            .collect())
    }

    /// Lease ids with chains in hostd's table.
    async fn chained() -> Result<BTreeSet<String>, EgressError> {
        let cmd = format!("nft -j list table inet {TABLE}");
        let text = match run("nft", &["-j", "list", "table", "inet", TABLE], None).await {
            Ok(t) => t,
            Err(e) if no_table(&e) => return Ok(BTreeSet::new()),
            Err(e) => return Err(e),
        };
        let json = parse_json(&cmd, &text)?;
        Ok(nft_objects(&json, "chain")
            .filter_map(|c| c.get("name")?.as_str()?.strip_prefix("lease_out_"))
            .map(str::to_owned)
            .collect())
    }
}

impl Firewall for NftFirewall {
    async fn create(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> Result<LeaseNetwork, EgressError> {
        let n = Names::of(lease)?;
        let net = self.reserve(lease, &n)?;
        let mut made = Made::default();
        match self.build(&n, &net, allow, &mut made).await {
            Ok(()) => {
                tracing::info!(lease, netns = %n.netns, addr = %net.lease_addr,
                    rules = %allow.rules.join(","), "lease network created");
                Ok(net)
            }
            Err(e) => {
                tracing::warn!(lease, error = %report(&e), "lease network not created; rolling back");
                self.undo(lease, &n, &net, &made).await;
                self.release(lease);
                Err(e)
            }
        }
    }

    async fn update(&self, lease: &str, allow: &EgressAllowList) -> Result<(), EgressError> {
        let n = Names::of(lease)?;
        // A lease without chains is a typed NotFound, not nft's "No such file" about a set.
        if !Self::chained().await?.contains(lease) {
            return Err(EgressError::NotFound {
                lease: lease.to_owned(),
                what: n.chain_out,
            });
        }
        nft(&allow_script(&n, allow)).await?;
        tracing::info!(lease, rules = %allow.rules.join(","), "egress allow-list updated");
        Ok(())
    }

    async fn counters(&self, lease: &str) -> Result<Bytes, EgressError> {
        let n = Names::of(lease)?;
        let args = ["-j", "list", "counters", "table", "inet", TABLE];
        let text = run("nft", &args, None).await?;
        let all = parse_counters(&parse_json(&format!("nft {}", args.join(" ")), &text)?);
        let get = |name: &String| {
            all.get(name).copied().ok_or_else(|| EgressError::NotFound {
                lease: lease.to_owned(),
                what: name.clone(),
            })
        };
        Ok(Bytes {
            out: get(&n.counter_out)?,
            in_: get(&n.counter_in)?,
        })
    }

    async fn remove(&self, lease: &str) -> Result<(), EgressError> {
        let n = Names::of(lease)?;
        if std::path::Path::new("/sys/class/net")
            .join(&n.host_if)
            .exists()
        {
            run("ip", &["link", "del", &n.host_if], None).await?;
        }
        if n.netns_path().exists() {
            run("ip", &["netns", "del", &n.netns], None).await?;
        }
        let lease_addr = self.leased_addr(lease);
        nft(&remove_script(&n, lease_addr)).await?;
        self.release(lease);
        tracing::info!(lease, "lease network removed");
        Ok(())
    }

    async fn list(&self) -> Result<Vec<ExistingLease>, EgressError> {
        let netns = Self::namespaces()?;
        let rules = Self::chained().await?;
        let mut out = Vec::new();
        for lease in netns.union(&rules) {
            let n = Names::of(lease)?;
            let network = self
                .host_addr(&n.host_if)
                .await
                .map(|host_addr| LeaseNetwork {
                    lease: lease.clone(),
                    netns: n.netns.clone(),
                    netns_path: n.netns_path(),
                    host_if: n.host_if.clone(),
                    lease_if: LEASE_IF.to_owned(),
                    host_addr,
                    lease_addr: Ipv4Addr::from(u32::from(host_addr) + 1),
                    prefix_len: 30,
                });
            out.push(ExistingLease {
                lease: lease.clone(),
                netns: netns.contains(lease),
                rules: rules.contains(lease),
                network,
            });
        }
        Ok(out)
    }
}

// The fake is for tests and dev builds only: the production build has no firewall that
// enforces nothing.
#[cfg(any(test, feature = "dev"))]
mod mem;
#[cfg(any(test, feature = "dev"))]
pub use mem::{FirewallCall, MemFirewall};

#[cfg(test)]
mod tests;
