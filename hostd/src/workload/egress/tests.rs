//! Pure tests of the names, pool, scripts and parsers, and tests against real namespaces and
//! the real nftables (root, `ip`, `nft`): a "foreign host" namespace stands in for the
//! outside world, and a helper process inside a namespace (this test binary, re-run with
//! `ip netns exec`) connects or listens. Dropped packets mean "no answer before a deadline".

use super::*;
use policy::model::Mode;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

const HELPER_ENV: &str = "SOV_EGRESS_HELPER";
const HELPER_TEST: &str = "workload::egress::tests::netns_helper";
/// How long a blocked connection attempt waits before it counts as dropped.
const BLOCKED_MS: u64 = 1500;
const PORT: u16 = 8080;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn allow(cidrs: &[&str]) -> EgressAllowList {
    EgressAllowList {
        tenant: "t".into(),
        classification: "c".into(),
        rules: vec!["r1".into()],
        mode: Mode::Enforce,
        cidrs: cidrs.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
        hosts: Vec::new(),
        policy_digest: "sha256:00".into(),
    }
}

fn unique(tag: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("t{}-{tag}-{n}", std::process::id())
}

fn pool(third: u8) -> Ipv4Pool {
    Ipv4Pool::new(Ipv4Addr::new(10, 231, third, 0), 24).unwrap()
}

/// Runs a command synchronously; returns (success, stdout + stderr).
fn sh(program: &str, args: &[&str]) -> (bool, String) {
    let out = StdCommand::new(program).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn must(program: &str, args: &[&str]) {
    let (ok, text) = sh(program, args);
    assert!(ok, "{program} {args:?}: {text}");
}

fn table_text() -> String {
    sh("nft", &["list", "table", "inet", TABLE]).1
}

fn link_exists(name: &str) -> bool {
    sh("ip", &["link", "show", "dev", name]).0
}

fn netns_listed(name: &str) -> bool {
    let (_, text) = sh("ip", &["netns", "list"]);
    text.lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

/// The tests here share hostd's table in the host's namespace, as one node's leases do. Each
/// holds a `TableUse` while it may touch the table; the last one out deletes it when no lease
/// is left in it and it was not there before the first one came, so that a test run leaves
/// the host's ruleset as it found it (a node's hostd on the same machine keeps its table).
struct TableUse;

/// (tests using the table now, whether it existed before the first of them).
static TABLE_USERS: std::sync::Mutex<(usize, bool)> = std::sync::Mutex::new((0, false));

impl TableUse {
    fn new() -> TableUse {
        let mut users = TABLE_USERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if users.0 == 0 {
            users.1 = sh("nft", &["list", "table", "inet", TABLE]).0;
        }
        users.0 += 1;
        TableUse
    }
}

impl Drop for TableUse {
    fn drop(&mut self) {
        let mut users = TABLE_USERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        users.0 -= 1;
        if users.0 == 0 && !users.1 && !table_text().contains("lease_out_") {
            let _ = sh("nft", &["delete", "table", "inet", TABLE]);
        }
    }
}

/// Removes a lease's network on drop, even when the test failed half-way: its masquerade
/// element too, by the address read from its namespace before that goes.
struct LeaseGuard(Names);

/// The IPv4 address (not loopback) inside the network namespace `netns`, if any.
fn netns_addr(netns: &str) -> Option<Ipv4Addr> {
    let (_, out) = sh("ip", &["-n", netns, "-4", "-o", "addr", "show"]);
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "inet")
        .filter_map(|w| w[1].split('/').next()?.parse::<Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
}

impl LeaseGuard {
    fn new(lease: &str) -> LeaseGuard {
        LeaseGuard(Names::of(lease).unwrap())
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let addr = netns_addr(&self.0.netns);
        let _ = sh("ip", &["link", "del", &self.0.host_if]);
        let _ = sh("ip", &["netns", "del", &self.0.netns]);
        let mut child = StdCommand::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let script = remove_script(&self.0, addr);
        let _ = child.stdin.take().unwrap().write_all(script.as_bytes());
        let _ = child.wait();
    }
}

/// A namespace standing in for the outside world, routed from the host: `allowed()` on its
/// veth and `other()` on its loopback, each with a listener on `PORT`.
struct Foreign {
    netns: String,
    host_if: String,
    n: u8,
    children: Vec<Child>,
}

impl Foreign {
    fn new(n: u8) -> Foreign {
        let pid = std::process::id() % 100_000;
        let f = Foreign {
            netns: format!("sovt-f{n}-{pid}"),
            host_if: format!("sovf{n}x{pid}"),
            n,
            children: Vec::new(),
        };
        let (ns, h) = (f.netns.as_str(), f.host_if.as_str());
        let _ = sh("ip", &["link", "del", h]);
        let _ = sh("ip", &["netns", "del", ns]);
        must("ip", &["netns", "add", ns]);
        must(
            "ip",
            &[
                "link", "add", h, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
        );
        must(
            "ip",
            &["addr", "add", &format!("{}/30", f.host_addr()), "dev", h],
        );
        must("ip", &["link", "set", h, "up"]);
        let inside = format!("{}/30", f.allowed());
        must("ip", &["-n", ns, "addr", "add", &inside, "dev", "eth0"]);
        must(
            "ip",
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/32", f.other()),
                "dev",
                "lo",
            ],
        );
        must("ip", &["-n", ns, "link", "set", "lo", "up"]);
        must("ip", &["-n", ns, "link", "set", "eth0", "up"]);
        let other = format!("{}/32", f.other());
        must(
            "ip",
            &["route", "add", &other, "via", &f.allowed().to_string()],
        );
        f
    }

    fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 232, self.n, 1)
    }

    fn allowed(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 232, self.n, 2)
    }

    fn other(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 233, self.n, 1)
    }

    /// Listeners on both addresses, answering `reply` bytes.
    fn serve(&mut self, reply: usize) {
        for a in [self.allowed(), self.other()] {
            let child = serve_in(&self.netns, SocketAddr::from((a, PORT)), reply);
            self.children.push(child);
        }
    }

    fn config(&self, pool: Ipv4Pool) -> FirewallConfig {
        FirewallConfig {
            pool,
            uplinks: vec![self.host_if.clone()],
        }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = sh("ip", &["link", "del", &self.host_if]);
        let _ = sh("ip", &["netns", "del", &self.netns]);
    }
}

/// Kills a helper on drop.
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn helper_command(netns: &str, spec: &str) -> StdCommand {
    let exe = std::env::current_exe().unwrap();
    let mut c = StdCommand::new("ip");
    c.args(["netns", "exec", netns])
        .arg(exe)
        .args([HELPER_TEST, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(HELPER_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

/// Starts a listener inside `netns` and waits until it is ready.
fn serve_in(netns: &str, addr: SocketAddr, reply: usize) -> Child {
    let mut child = helper_command(netns, &format!("serve {addr} {reply}"))
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("HELPER ready") => return child,
            Ok(_) => continue,
            Err(e) => {
                let _ = child.kill();
                panic!("listener in {netns} on {addr} not ready: {e}");
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Connected, sent everything, read this many bytes back.
    Ok(u64),
    /// No answer before the deadline: dropped.
    Blocked,
    /// Anything else (refused, unreachable...).
    Error(String),
}

/// Connects from inside `netns` to `addr`, sends `send` bytes and reads the reply.
fn connect_from(netns: &str, addr: SocketAddr, send: usize) -> Outcome {
    let spec = format!("connect {addr} {send} {BLOCKED_MS}");
    let child = helper_command(netns, &spec).spawn().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("HELPER ").map(|(_, rest)| rest))
        .unwrap_or("no result")
        .to_owned();
    match line.split_once(' ') {
        Some(("ok", n)) => Outcome::Ok(n.parse().unwrap()),
        _ if line == "timeout" => Outcome::Blocked,
        _ => Outcome::Error(line),
    }
}

/// The helper, when this binary is re-run inside a namespace with `HELPER_ENV` set:
/// `serve ADDR REPLY` or `connect ADDR SEND TIMEOUT_MS`. Without it, it does nothing.
#[test]
#[ignore = "run inside a namespace by the other tests"]
fn netns_helper() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let words: Vec<&str> = spec.split_whitespace().collect();
    let addr: SocketAddr = words[1].parse().unwrap();
    match words[0] {
        "serve" => helper_serve(addr, words[2].parse().unwrap()),
        "connect" => helper_connect(
            addr,
            words[2].parse().unwrap(),
            Duration::from_millis(words[3].parse().unwrap()),
        ),
        other => panic!("unknown helper mode {other}"),
    }
}

fn helper_serve(addr: SocketAddr, reply: usize) {
    let listener = TcpListener::bind(addr).unwrap();
    println!("HELPER ready");
    std::io::stdout().flush().unwrap();
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        std::thread::spawn(move || {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
            let _ = s.write_all(&vec![7u8; reply]);
        });
    }
}

fn helper_connect(addr: SocketAddr, send: usize, timeout: Duration) {
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            println!("HELPER timeout");
            return;
        }
        Err(e) => {
            println!("HELPER error {e}");
            return;
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let result = s
        .write_all(&vec![1u8; send])
        .and_then(|()| s.shutdown(std::net::Shutdown::Write))
        .and_then(|()| {
            let mut got = Vec::new();
            s.read_to_end(&mut got).map(|_| got.len())
        });
    match result {
        Ok(n) => println!("HELPER ok {n}"),
        Err(e) => println!("HELPER error {e}"),
    }
}

// ---- pure ----

#[test]
fn lease_ids_are_validated_and_names_bounded() {
    let long = "a".repeat(MAX_LEASE_ID);
    for ok in ["a", "lease-1_X", long.as_str()] {
        let n = Names::of(ok).unwrap();
        assert!(n.host_if.len() <= 15 && n.host_if.starts_with(HOST_IF_PREFIX));
        assert_eq!(
            n.netns_path(),
            PathBuf::from(format!("/run/netns/sov-{ok}"))
        );
    }
    let too_long = "a".repeat(MAX_LEASE_ID + 1);
    for bad in [
        "",
        "a b",
        "a;b",
        "a/b",
        "a.b",
        "ä",
        "a\"b",
        too_long.as_str(),
    ] {
        assert!(
            matches!(Names::of(bad), Err(EgressError::InvalidLease { .. })),
            "{bad:?}"
        );
    }
    assert_ne!(
        Names::of("a").unwrap().host_if,
        Names::of("b").unwrap().host_if
    );
}

#[test]
fn pool_gives_the_lowest_free_slot_and_runs_out() {
    assert!(Ipv4Pool::new(Ipv4Addr::new(10, 231, 0, 1), 24).is_err());
    assert!(Ipv4Pool::new(Ipv4Addr::new(10, 231, 0, 0), 31).is_err());
    assert!(Ipv4Pool::new(Ipv4Addr::new(10, 0, 0, 0), 7).is_err());
    let p = Ipv4Pool::new(Ipv4Addr::new(10, 231, 0, 0), 29).unwrap();
    assert_eq!(p.slots(), 2);
    assert_eq!(
        p.slot(1),
        (Ipv4Addr::new(10, 231, 0, 5), Ipv4Addr::new(10, 231, 0, 6))
    );
    let mut used = BTreeSet::new();
    assert_eq!(p.allocate(&used).unwrap(), 0);
    used.insert(p.slot(0).0);
    assert_eq!(p.allocate(&used).unwrap(), 1);
    used.insert(p.slot(1).0);
    assert!(matches!(
        p.allocate(&used),
        Err(EgressError::PoolExhausted { .. })
    ));
    assert!(p.contains(Ipv4Addr::new(10, 231, 0, 7)));
    assert!(!p.contains(Ipv4Addr::new(10, 231, 0, 8)));
}

#[test]
fn allow_set_drops_covered_prefixes_and_ipv6() {
    let l = allow(&["10.0.0.0/8", "10.1.0.0/16", "192.0.2.1/32", "2001:db8::/32"]);
    let v4: Vec<String> = allowed_v4(&l).iter().map(Cidr::to_string).collect();
    assert_eq!(v4, ["10.0.0.0/8", "192.0.2.1/32"]);
    let n = Names::of("x").unwrap();
    let s = allow_script(&n, &l);
    assert!(
        s.starts_with("flush set inet sovereign_host allow_x\n"),
        "{s}"
    );
    assert!(s.contains("{ 10.0.0.0/8, 192.0.2.1/32 }"), "{s}");
    assert_eq!(allow_script(&n, &allow(&[])).lines().count(), 1);
}

#[test]
fn resolv_conf_keeps_only_permitted_resolvers() {
    let host = "# generated\nnameserver 192.0.2.53\nnameserver 127.0.0.53\n\
                nameserver 198.51.100.53\nnameserver 2001:db8::53\nsearch example\n";
    let some = resolv_conf(host, &allow(&["192.0.2.0/24", "127.0.0.0/8"]));
    assert!(some.contains("nameserver 192.0.2.53\n"), "{some}");
    assert!(
        !some.contains("127.0.0.53") && !some.contains("198.51.100.53"),
        "{some}"
    );
    let none = resolv_conf(host, &allow(&["203.0.113.0/24"]));
    assert!(!none.contains("nameserver"), "{none}");
    assert!(
        none.starts_with("# Name resolution is not permitted"),
        "{none}"
    );
}

#[tokio::test]
async fn a_host_without_resolv_conf_offers_no_resolvers_and_an_unreadable_one_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    let permits_all = allow(&["0.0.0.0/0"]);
    let missing = resolv_conf_from(&t.path().join("resolv.conf"), &permits_all)
        .await
        .unwrap();
    assert!(
        missing.starts_with("# Name resolution is not permitted")
            && !missing.contains("nameserver"),
        "{missing}"
    );
    // A directory where the file should be is not "no resolvers": it is an error.
    let err = resolv_conf_from(t.path(), &permits_all).await.unwrap_err();
    assert!(matches!(err, EgressError::ResolvConf { .. }), "{err}");
}

#[test]
fn counters_are_read_from_nft_json() {
    let json: Value = serde_json::from_str(
        r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
        {"counter": {"family": "inet", "name": "out_a", "table": "sovereign_host", "handle": 1,
         "packets": 3, "bytes": 180}},
        {"counter": {"family": "inet", "name": "out_b", "table": "other", "handle": 2,
         "packets": 1, "bytes": 60}}]}"#,
    )
    .unwrap();
    let c = parse_counters(&json);
    assert_eq!(c.get("out_a"), Some(&180));
    assert_eq!(c.get("out_b"), None);
}

#[tokio::test]
async fn mem_firewall_records_calls_and_allocates() {
    let fw = MemFirewall::new(pool(0));
    let a = fw.create("a", &allow(&["192.0.2.0/24"])).await.unwrap();
    let b = fw.create("b", &allow(&[])).await.unwrap();
    assert_ne!(a.lease_addr, b.lease_addr);
    assert!(matches!(
        fw.create("a", &allow(&[])).await,
        Err(EgressError::AlreadyExists { .. })
    ));
    fw.update("a", &allow(&["198.51.100.0/24"])).await.unwrap();
    assert_eq!(fw.allowed("a").unwrap()[0].to_string(), "198.51.100.0/24");
    fw.set_counters("a", Bytes { out: 5, in_: 6 });
    assert_eq!(fw.counters("a").await.unwrap(), Bytes { out: 5, in_: 6 });
    fw.remove("a").await.unwrap();
    fw.remove("a").await.unwrap();
    assert!(fw.counters("a").await.is_err());
    assert_eq!(fw.list().await.unwrap().len(), 1);
    fw.fail_creates(true);
    assert!(matches!(
        fw.create("c", &allow(&[])).await,
        Err(EgressError::Command { .. })
    ));
    assert_eq!(fw.calls().len(), 10);
    assert_eq!(fw.calls()[4], FirewallCall::Counters { lease: "a".into() });
}

// ---- real namespaces and nftables ----

fn at(a: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((a, PORT))
}

#[tokio::test]
async fn lease_reaches_only_allowed_addresses_and_counts_bytes() {
    let _table = TableUse::new();
    let mut foreign = Foreign::new(1);
    foreign.serve(50_000);
    let fw = NftFirewall::adopt(foreign.config(pool(101))).await.unwrap();
    let lease = unique("reach");
    let _guard = LeaseGuard::new(&lease);
    let only = allow(&[&format!("{}/32", foreign.allowed())]);
    let net = fw.create(&lease, &only).await.unwrap();
    assert_eq!(
        net.netns_path,
        PathBuf::from(format!("/run/netns/sov-{lease}"))
    );
    assert_eq!(fw.counters(&lease).await.unwrap(), Bytes::default());

    assert_eq!(
        connect_from(&net.netns, at(foreign.allowed()), 100_000),
        Outcome::Ok(50_000)
    );
    let bytes = fw.counters(&lease).await.unwrap();
    assert!(bytes.out >= 100_000, "{bytes:?}");
    assert!(bytes.in_ >= 50_000, "{bytes:?}");

    assert_eq!(
        connect_from(&net.netns, at(foreign.other()), 10),
        Outcome::Blocked
    );
    let after = fw.counters(&lease).await.unwrap();
    assert!(
        after.out - bytes.out < 1_000,
        "a blocked attempt is not counted as egress"
    );
}

#[tokio::test]
async fn host_services_are_unreachable_but_loopback_works() {
    let _table = TableUse::new();
    let foreign = Foreign::new(2);
    let fw = NftFirewall::adopt(foreign.config(pool(102))).await.unwrap();
    let lease = unique("host");
    let _guard = LeaseGuard::new(&lease);
    // Even an allow-everything list must not open the host itself.
    let net = fw.create(&lease, &allow(&["0.0.0.0/0"])).await.unwrap();
    let api = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = api.local_addr().unwrap().port();
    let accept_one = api.try_clone().unwrap();
    let acceptor = std::thread::spawn(move || drop(accept_one.accept()));
    // The stand-in for hostd's API answers others (the foreign namespace, not a lease)...
    let from_foreign = SocketAddr::from((foreign.host_addr(), port));
    assert_eq!(
        connect_from(&foreign.netns, from_foreign, 0),
        Outcome::Ok(0)
    );
    acceptor.join().unwrap();
    // ...but not the lease, neither on its gateway nor on another host address.
    let gateway = SocketAddr::from((net.host_addr, port));
    assert_eq!(connect_from(&net.netns, gateway, 1), Outcome::Blocked);
    assert_eq!(connect_from(&net.netns, from_foreign, 1), Outcome::Blocked);
    // Loopback inside the namespace is the lease's own.
    let lo = SocketAddr::from(([127, 0, 0, 1], 9000));
    let _server = Helper(serve_in(&net.netns, lo, 123));
    assert_eq!(connect_from(&net.netns, lo, 10), Outcome::Ok(123));
    drop(api);
}

#[tokio::test]
async fn update_flips_allowed_and_denied() {
    let _table = TableUse::new();
    let mut foreign = Foreign::new(3);
    foreign.serve(10);
    let fw = NftFirewall::adopt(foreign.config(pool(103))).await.unwrap();
    let lease = unique("update");
    let _guard = LeaseGuard::new(&lease);
    let first = allow(&[&format!("{}/32", foreign.allowed())]);
    let net = fw.create(&lease, &first).await.unwrap();
    assert_eq!(
        connect_from(&net.netns, at(foreign.allowed()), 1),
        Outcome::Ok(10)
    );
    assert_eq!(
        connect_from(&net.netns, at(foreign.other()), 1),
        Outcome::Blocked
    );

    let second = allow(&[&format!(
        "{}/24",
        foreign
            .other()
            .to_string()
            .trim_end_matches(".1")
            .to_owned()
            + ".0"
    )]);
    fw.update(&lease, &second).await.unwrap();
    assert_eq!(
        connect_from(&net.netns, at(foreign.allowed()), 1),
        Outcome::Blocked
    );
    assert_eq!(
        connect_from(&net.netns, at(foreign.other()), 1),
        Outcome::Ok(10)
    );

    fw.update(&lease, &allow(&[])).await.unwrap();
    assert_eq!(
        connect_from(&net.netns, at(foreign.other()), 1),
        Outcome::Blocked
    );
}

#[tokio::test]
async fn remove_leaves_nothing_and_is_idempotent() {
    let _table = TableUse::new();
    let fw = NftFirewall::adopt(FirewallConfig {
        pool: pool(104),
        uplinks: Vec::new(),
    })
    .await
    .unwrap();
    let lease = unique("remove");
    let _guard = LeaseGuard::new(&lease);
    let n = Names::of(&lease).unwrap();
    let net = fw.create(&lease, &allow(&["192.0.2.0/24"])).await.unwrap();
    assert!(netns_listed(&n.netns) && link_exists(&n.host_if));
    assert!(table_text().contains(&n.chain_out));
    let listed = fw.list().await.unwrap();
    let mine = listed.iter().find(|e| e.lease == lease).unwrap();
    assert!(mine.netns && mine.rules);
    assert_eq!(mine.network.as_ref(), Some(&net));

    fw.remove(&lease).await.unwrap();
    assert!(!netns_listed(&n.netns), "namespace left");
    assert!(!link_exists(&n.host_if), "veth left");
    let table = table_text();
    assert!(!table.contains(&lease), "rules left: {table}");
    assert!(!fw.list().await.unwrap().iter().any(|e| e.lease == lease));
    fw.remove(&lease).await.unwrap();
    // The pool slot is free again.
    let again = fw.create(&lease, &allow(&[])).await.unwrap();
    assert_eq!(again.lease_addr, net.lease_addr);
    fw.remove(&lease).await.unwrap();
}

#[tokio::test]
async fn adopt_finds_existing_leases_after_a_restart() {
    let _table = TableUse::new();
    let config = FirewallConfig {
        pool: pool(105),
        uplinks: Vec::new(),
    };
    let first = NftFirewall::adopt(config.clone()).await.unwrap();
    let (a, b) = (unique("adopt-a"), unique("adopt-b"));
    let (_ga, _gb) = (LeaseGuard::new(&a), LeaseGuard::new(&b));
    let net_a = first.create(&a, &allow(&[])).await.unwrap();
    drop(first);
    let second = NftFirewall::adopt(config).await.unwrap();
    assert!(matches!(
        second.create(&a, &allow(&[])).await,
        Err(EgressError::AlreadyExists { .. })
    ));
    let net_b = second.create(&b, &allow(&[])).await.unwrap();
    assert_ne!(
        net_a.host_addr, net_b.host_addr,
        "adopted address handed out again"
    );
    second.remove(&a).await.unwrap();
    second.remove(&b).await.unwrap();
}

/// Whether `addr` is in the set of masqueraded lease addresses.
fn masqueraded(addr: Ipv4Addr) -> bool {
    let text = sh("nft", &["list", "set", "inet", TABLE, "leases4"]).1;
    let addr = addr.to_string();
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|w| w == addr)
}

/// A node whose pool changed, or `hostd dev` after these tests: a firewall whose pool overlaps
/// the pool of leases already in the table still makes its lease networks, and masquerades
/// exactly the live leases' addresses.
#[tokio::test]
async fn overlapping_pools_share_the_table() {
    let _table = TableUse::new();
    let narrow = Ipv4Pool::new(Ipv4Addr::new(10, 231, 110, 0), 24).unwrap();
    let wide = Ipv4Pool::new(Ipv4Addr::new(10, 231, 110, 0), 23).unwrap();
    let config = |pool| FirewallConfig {
        pool,
        uplinks: Vec::new(),
    };
    let first = NftFirewall::adopt(config(narrow)).await.unwrap();
    let (a, b) = (unique("narrow"), unique("wide"));
    let (_ga, _gb) = (LeaseGuard::new(&a), LeaseGuard::new(&b));
    let net_a = first.create(&a, &allow(&[])).await.unwrap();
    let second = NftFirewall::adopt(config(wide)).await.unwrap();
    let net_b = second.create(&b, &allow(&[])).await.unwrap();
    assert_ne!(net_a.lease_addr, net_b.lease_addr);
    for net in [&net_a, &net_b] {
        assert!(masqueraded(net.lease_addr));
    }
    first.remove(&a).await.unwrap();
    assert!(!masqueraded(net_a.lease_addr));
    second.remove(&b).await.unwrap();
    assert!(!masqueraded(net_b.lease_addr));
}

#[tokio::test]
async fn failed_create_rolls_back_what_it_made() {
    let _table = TableUse::new();
    let fw = NftFirewall::adopt(FirewallConfig {
        pool: pool(106),
        uplinks: Vec::new(),
    })
    .await
    .unwrap();
    let lease = unique("fail");
    let _guard = LeaseGuard::new(&lease);
    let n = Names::of(&lease).unwrap();
    // Someone else's interface already has the name: `ip link add` fails after the rules and
    // the namespace were made.
    let peer = format!("sovx{}", std::process::id() % 100_000);
    must(
        "ip",
        &[
            "link", "add", &n.host_if, "type", "veth", "peer", "name", &peer,
        ],
    );
    let err = fw.create(&lease, &allow(&[])).await.unwrap_err();
    let dummy_kept = link_exists(&n.host_if);
    let _ = sh("ip", &["link", "del", &n.host_if]);
    match &err {
        EgressError::Command {
            command, stderr, ..
        } => {
            assert!(command.starts_with("ip link add"), "{command}");
            assert!(stderr.contains("exists"), "{stderr}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(dummy_kept, "rollback deleted an interface it did not make");
    assert!(
        !netns_listed(&n.netns),
        "namespace left after a failed create"
    );
    assert!(
        !table_text().contains(&lease),
        "rules left after a failed create"
    );
    // And the lease can be created once the obstacle is gone.
    fw.create(&lease, &allow(&[])).await.unwrap();
    fw.remove(&lease).await.unwrap();
}

#[tokio::test]
async fn refusals_are_typed() {
    let _table = TableUse::new();
    let fw = NftFirewall::adopt(FirewallConfig {
        pool: Ipv4Pool::new(Ipv4Addr::new(10, 231, 107, 0), 30).unwrap(),
        uplinks: Vec::new(),
    })
    .await
    .unwrap();
    let bad = fw.create("a;b", &allow(&[])).await.unwrap_err();
    assert!(matches!(bad, EgressError::InvalidLease { .. }), "{bad}");
    assert!(!netns_listed("sov-a;b"));
    let (a, b) = (unique("one"), unique("two"));
    let (_ga, _gb) = (LeaseGuard::new(&a), LeaseGuard::new(&b));
    fw.create(&a, &allow(&[])).await.unwrap();
    let dup = fw.create(&a, &allow(&[])).await.unwrap_err();
    assert!(matches!(dup, EgressError::AlreadyExists { .. }), "{dup}");
    let full = fw.create(&b, &allow(&[])).await.unwrap_err();
    assert!(matches!(full, EgressError::PoolExhausted { .. }), "{full}");
    assert!(!netns_listed(&format!("sov-{b}")));
    let missing = fw.counters(&b).await.unwrap_err();
    assert!(matches!(missing, EgressError::NotFound { .. }), "{missing}");
    let missing = fw.update(&b, &allow(&[])).await.unwrap_err();
    assert!(matches!(missing, EgressError::NotFound { .. }), "{missing}");
    fw.remove(&a).await.unwrap();
}

#[tokio::test]
async fn a_published_port_reaches_the_job_inside_the_namespace() {
    let _table = TableUse::new();
    use crate::workload::publish::{PortConfig, ServicePort};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fw = NftFirewall::adopt(FirewallConfig {
        pool: pool(108),
        uplinks: Vec::new(),
    })
    .await
    .unwrap();
    let lease = unique("publish");
    let _guard = LeaseGuard::new(&lease);
    let net = fw.create(&lease, &allow(&[])).await.unwrap();
    let target = SocketAddr::from((net.lease_addr, PORT));
    let _job = Helper(serve_in(&net.netns, target, 30_000));
    let config = PortConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        target,
        max_connections: 4,
        connect_timeout: Duration::from_secs(5),
    };
    let port = ServicePort::publish(&lease, config).await.unwrap();
    let mut c = tokio::net::TcpStream::connect(port.local_addr())
        .await
        .unwrap();
    c.write_all(&[5u8; 20_000]).await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(30_000))), "{read:?}");
    let counters = port.counters();
    assert_eq!(counters.to_job.load(Ordering::Relaxed), 20_000);
    assert_eq!(counters.from_job.load(Ordering::Relaxed), 30_000);
    port.stop().await;
    fw.remove(&lease).await.unwrap();
}

#[tokio::test]
async fn leases_cannot_reach_each_other_even_when_allowed_everywhere() {
    let _table = TableUse::new();
    let fw = NftFirewall::adopt(FirewallConfig {
        pool: pool(109),
        uplinks: Vec::new(),
    })
    .await
    .unwrap();
    let (a, b) = (unique("peer-a"), unique("peer-b"));
    let (_ga, _gb) = (LeaseGuard::new(&a), LeaseGuard::new(&b));
    let anywhere = allow(&["0.0.0.0/0"]);
    let net_a = fw.create(&a, &anywhere).await.unwrap();
    let net_b = fw.create(&b, &anywhere).await.unwrap();
    let target = SocketAddr::from((net_b.lease_addr, PORT));
    let _server = Helper(serve_in(&net_b.netns, target, 1));
    // The listener answers inside its own namespace...
    assert_eq!(connect_from(&net_b.netns, target, 0), Outcome::Ok(1));
    // ...but not from the other lease.
    assert_eq!(connect_from(&net_a.netns, target, 0), Outcome::Blocked);
    fw.remove(&a).await.unwrap();
    fw.remove(&b).await.unwrap();
}

/// Ctrl-C at a `hostd dev` terminal signals the terminal's foreground group: the `ip` and
/// `nft` of a shutdown's cleanup must not be in it. Each leads a group of its own (its process
/// group, field 5 of /proc/PID/stat, is its own PID).
#[tokio::test]
async fn commands_run_outside_hostds_process_group() {
    let script = r#"test "$(cut -d' ' -f5 /proc/$$/stat)" = $$"#;
    run("sh", &["-c", script], None).await.unwrap();
}
