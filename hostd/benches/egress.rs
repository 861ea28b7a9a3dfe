//! Egress throughput through a lease's network, printed (not asserted), side by side in one
//! run: the same TCP stream from a namespace to a "foreign host" namespace through the node,
//! (a) through hostd's filter with a 1,000-prefix allow-list, (b) with a 1-prefix list, and
//! (c) on a plain veth path that hostd's table does not filter, masqueraded like a lease's
//! traffic (so that only the filter differs). Rounds alternate so that a noisy neighbour hits
//! all three alike.
//!
//! Needs root, `ip` and `nft`. `cargo bench -p hostd --bench egress`. The bench re-runs itself
//! inside namespaces as the sender and the receiver.

use hostd::workload::egress::{Firewall, FirewallConfig, Ipv4Pool, NftFirewall};
use policy::{Cidr, EgressAllowList, Mode};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BYTES: u64 = 512 << 20;
const ROUNDS: usize = 3;

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    assert!(out.status.success(), "{cmd}: {out:?}");
}

/// In a namespace: accept one connection, read everything, print the byte count.
fn serve(addr: &str) {
    let l = std::net::TcpListener::bind(addr).expect("bind");
    println!("listening");
    let (mut c, _) = l.accept().expect("accept");
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k as u64,
        }
    }
    println!("{n}");
}

/// In a namespace: send `bytes` to `addr`, print seconds taken.
fn send(addr: &str, bytes: u64) {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    let buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        c.write_all(&buf[..k]).expect("write");
        left -= k as u64;
    }
    c.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    println!("{}", t.elapsed().as_secs_f64());
}

/// One transfer from namespace `from` to `to_addr` (a listener in namespace `to`): MB/s.
fn transfer(from: &str, to: &str, to_addr: &str) -> f64 {
    let exe = std::env::current_exe().expect("exe");
    let mut server = Command::new("ip")
        .args(["netns", "exec", to])
        .arg(&exe)
        .args(["--serve", to_addr])
        .stdout(Stdio::piped())
        .spawn()
        .expect("server");
    let mut ready = [0u8; 10];
    let _ = server
        .stdout
        .as_mut()
        .expect("stdout")
        .read(&mut ready)
        .expect("ready");
    let out = Command::new("ip")
        .args(["netns", "exec", from])
        .arg(&exe)
        .args(["--send", to_addr, &BYTES.to_string()])
        .output()
        .expect("sender");
    let _ = server.wait();
    let secs: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("seconds");
    BYTES as f64 / secs / 1e6
}

/// A namespace behind a veth with `host` on the node's side and `ns_addr` inside (/30).
fn plain_ns(name: &str, host_if: &str, host: &str, ns_addr: &str) {
    sh(&format!(
        "ip netns add {name} && ip link add {host_if} type veth peer name eth0 netns {name} && \
         ip addr add {host}/30 dev {host_if} && ip link set {host_if} up && \
         sysctl -qw net.ipv4.conf.{host_if}.forwarding=1 && \
         ip netns exec {name} ip addr add {ns_addr}/30 dev eth0 && \
         ip netns exec {name} ip link set eth0 up && ip netns exec {name} ip link set lo up && \
         ip netns exec {name} ip route add default via {host}"
    ));
}

fn cleanup(names: &[(&str, &str)]) {
    for (ns, link) in names {
        let _ = Command::new("ip").args(["link", "del", link]).output();
        let _ = Command::new("ip").args(["netns", "del", ns]).output();
    }
}

fn allow(cidrs: Vec<Cidr>) -> EgressAllowList {
    EgressAllowList {
        tenant: "bench".into(),
        classification: "internal".into(),
        rules: vec!["bench".into()],
        mode: Mode::Enforce,
        cidrs,
        hosts: Vec::new(),
        policy_digest: String::new(),
    }
}

/// 999 prefixes that do not cover the foreign host, and the one that does, last in order.
fn thousand_prefixes() -> Vec<Cidr> {
    let mut v: Vec<Cidr> = (0..999u32)
        .map(|i| {
            let a = Ipv4Addr::from(0x6400_0000u32 + (i << 8)); // 100.x.y.0/24
            Cidr::parse(&format!("{a}/24")).expect("cidr")
        })
        .collect();
    v.push(Cidr::parse("10.234.9.0/30").expect("cidr"));
    v.sort();
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        return serve(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--send") {
        return send(&args[i + 1], args[i + 2].parse().expect("bytes"));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let names = [("sovb-foreign", "svbf0"), ("sovb-plain", "svbp0")];
    cleanup(&names);
    let _ = Command::new("nft")
        .args(["delete", "table", "ip", "sovb_nat"])
        .output();
    // The foreign host: 10.234.9.2; the plain (unfiltered) sender: 10.234.8.2.
    plain_ns("sovb-foreign", "svbf0", "10.234.9.1", "10.234.9.2");
    plain_ns("sovb-plain", "svbp0", "10.234.8.1", "10.234.8.2");
    sh("nft -f - <<'EOF'\ntable ip sovb_nat {\n  chain postrouting {\n    type nat hook postrouting priority srcnat;\n    ip saddr 10.234.8.0/30 oifname \"svbf0\" masquerade\n  }\n}\nEOF");
    let pool = Ipv4Pool::new(Ipv4Addr::new(10, 235, 0, 0), 24).expect("pool");
    let fw = rt
        .block_on(NftFirewall::adopt(FirewallConfig {
            pool,
            uplinks: vec!["svbf0".into()],
        }))
        .expect("firewall");
    let wide = allow(thousand_prefixes());
    let narrow = allow(vec![Cidr::parse("10.234.9.0/30").expect("cidr")]);
    let net = rt
        .block_on(fw.create("bench-egress", &wide))
        .expect("lease net");
    let lease_ns = net.netns.clone();
    let target = "10.234.9.2:7100";
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        rt.block_on(fw.update("bench-egress", &wide))
            .expect("update");
        a.push(transfer(&lease_ns, "sovb-foreign", target));
        rt.block_on(fw.update("bench-egress", &narrow))
            .expect("update");
        b.push(transfer(&lease_ns, "sovb-foreign", target));
        c.push(transfer("sovb-plain", "sovb-foreign", target));
        std::thread::sleep(Duration::from_millis(200));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    let (a, b, c) = (med(&mut a), med(&mut b), med(&mut c));
    println!(
        "egress {} MiB per transfer, median of {ROUNDS} rounds:",
        BYTES >> 20
    );
    println!("  1,000-prefix allow-list through hostd's filter: {a:.0} MB/s");
    println!("  1-prefix allow-list through hostd's filter:     {b:.0} MB/s");
    println!("  plain veth path, masqueraded, not filtered:     {c:.0} MB/s");
    println!("  ratio 1,000 prefixes / unfiltered: {:.2}", a / c);
    let _ = rt.block_on(fw.remove("bench-egress"));
    let _ = Command::new("nft")
        .args(["delete", "table", "ip", "sovb_nat"])
        .output();
    cleanup(&names);
}
