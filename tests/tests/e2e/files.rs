//! `sovctl cp` into and out of a lease's encrypted scratch, on the dev node with jobs (real
//! systemd, fscrypt on a loop-mounted ext4): what a tenant uploads its job reads, what the
//! job writes comes back byte for byte; other tenants, auditors, bad paths, symlinks a job
//! planted, the quota and ended leases are refused, and nothing is left half-written.

use crate::jobs::{end_and_wait, jobs_node, lease, ledger, one_at_a_time, run};
use crate::{create_tenants, json};
use e2e::DevNode;
use sovctl::client::{Client, ClientError};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn random_file(path: &Path, mib: u64) {
    let out = Command::new("head")
        .args(["-c", &format!("{}", mib << 20), "/dev/urandom"])
        .output()
        .unwrap();
    std::fs::write(path, out.stdout).unwrap();
}

fn refused(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    assert!(err.contains(needle), "wanted {needle:?} in {err}");
}

/// The node's status for an upload of `path` (a few bytes) by `client`.
async fn put_status(c: &Client, lease: &str, path: &str) -> u16 {
    match c.upload(lease, path, &b"x"[..], 1, |_| {}).await {
        Ok(_) => 201,
        Err(ClientError::Api { status, .. }) => status,
        Err(e) => panic!("{e}"),
    }
}

/// The `transfer` records of `lease`, once there are `n` (each is appended when its transfer
/// ends, which may be just after the client saw the end).
fn transfers(node: &DevNode, lease: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found: Vec<_> = ledger(node)
            .into_iter()
            .filter(|r| r["kind"] == "transfer" && r["lease"] == lease)
            .collect();
        if found.len() >= n {
            assert_eq!(found.len(), n, "{found:#?}");
            return found;
        }
        assert!(Instant::now() < deadline, "{found:#?}\n{}", node.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The record of `lease` going `direction`.
fn one<'a>(recs: &'a [serde_json::Value], direction: &str) -> &'a serde_json::Value {
    let mut it = recs.iter().filter(|r| r["direction"] == direction);
    let r = it
        .next()
        .unwrap_or_else(|| panic!("no {direction}: {recs:#?}"));
    assert!(it.next().is_none(), "two {direction}: {recs:#?}");
    r
}

/// Every transfer is in the signed ledger, decided by the residency policy: an upload and a
/// download of an internal lease (allowed: the dev user's loopback is the `dev-workstation`
/// endpoint, in India) are recorded with their bytes; a download from a `public` lease is
/// refused with 403 and the policy's reasons (the dev policy has no egress rule for public
/// data, so it is denied by default) and recorded as `deny` with 0 bytes; the export with
/// these records verifies offline.
#[test]
fn transfers_are_decided_by_the_policy_and_recorded() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("data.bin");
    random_file(&src, 1);
    let src = src.to_str().unwrap();
    e2e::ok(&node.sovctl("hyd-speech", &["cp", src, &format!("{la}:data.bin")]));
    let back = local.path().join("back.bin");
    let back_s = back.to_str().unwrap();
    e2e::ok(&node.sovctl("hyd-speech", &["cp", &format!("{la}:data.bin"), back_s]));
    assert_eq!(sha256(&back), sha256(Path::new(src)));
    let recs = transfers(&node, &la, 2);
    for dir in ["in", "out"] {
        let r = one(&recs, dir);
        assert_eq!(r["bytes"], 1 << 20, "{r}");
        assert_eq!(
            (r["decision"].as_str(), r["complete"].as_bool()),
            (Some("allow"), Some(true)),
            "{r}"
        );
        assert_eq!(
            (r["tenant"].as_str(), r["client"].as_str()),
            (Some("hyd-speech"), Some("127.0.0.1")),
            "{r}"
        );
        assert!(
            r["policy_digest"].as_str().unwrap().starts_with("sha256:"),
            "{r}"
        );
    }
    assert_eq!(one(&recs, "in")["rules"], serde_json::json!([]));
    assert_eq!(
        one(&recs, "out")["rules"],
        serde_json::json!(["egress-stays-in-india"])
    );

    let lp = json(&node.sovctl(
        "hyd-speech",
        &[
            "--json",
            "lease",
            "create",
            "--tenant",
            "hyd-speech",
            "--gpus",
            "1",
            "--model",
            "H100",
            "--classification",
            "public",
        ],
    ))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    e2e::ok(&node.sovctl("hyd-speech", &["cp", src, &format!("{lp}:data.bin")]));
    let denied = node.sovctl(
        "hyd-speech",
        &["cp", &format!("{lp}:data.bin"), &format!("{back_s}.2")],
    );
    refused(&denied, 1, "download denied by residency policy");
    refused(&denied, 1, "deny by default");
    assert!(!Path::new(&format!("{back_s}.2")).exists());
    let recs = transfers(&node, &lp, 2);
    assert_eq!(one(&recs, "in")["decision"], "allow");
    let d = one(&recs, "out");
    assert_eq!(
        (d["decision"].as_str(), d["bytes"].as_u64()),
        (Some("deny"), Some(0)),
        "{d}"
    );
    assert!(!d["reasons"].as_array().unwrap().is_empty(), "{d}");

    job_output_is_a_download(&node, &la, &lp);

    let out_dir = tempfile::tempdir().unwrap();
    let export = out_dir.path().join("export");
    let export = export.to_str().unwrap();
    e2e::ok(&node.sovctl("auditor", &["audit", "export", "--out", export]));
    let vkey = node.dir.join("state/log.vkey");
    let verified = e2e::ok(&node.sovctl(
        "",
        &["audit", "verify", export, "--vkey", vkey.to_str().unwrap()],
    ));
    assert!(verified.contains("transfer 6"), "{verified}");
    end_and_wait(&node, "hyd-speech", &la);
    end_and_wait(&node, "hyd-speech", &lp);
}

/// A job's output leaving the node is a download like a file's: allowed and recorded with its
/// bytes from the internal lease; refused (403 with the policy's reasons) and recorded from
/// the public one, whose output never reaches the client; never readable by an auditor.
fn job_output_is_a_download(node: &DevNode, internal: &str, public: &str) {
    let (code, out) = run(node, "hyd-speech", internal, "echo hello");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("hello"), "{out}");
    let recs = transfers(node, internal, 3);
    let logs: Vec<_> = recs
        .iter()
        .filter(|r| r["direction"] == "out" && r["bytes"] == 6)
        .collect();
    assert_eq!(logs.len(), 1, "{recs:#?}");
    assert_eq!(
        (logs[0]["decision"].as_str(), logs[0]["complete"].as_bool()),
        (Some("allow"), Some(true)),
        "{recs:#?}"
    );

    let denied = node.sovctl(
        "hyd-speech",
        &[
            "job",
            "run",
            "--lease",
            public,
            "--",
            "/bin/echo",
            "from-public",
        ],
    );
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(err.contains("download denied by residency policy"), "{err}");
    assert!(!String::from_utf8_lossy(&denied.stdout).contains("from-public"));
    let recs = transfers(node, public, 3);
    let denials = recs
        .iter()
        .filter(|r| r["direction"] == "out" && r["decision"] == "deny" && r["bytes"] == 0)
        .count();
    assert_eq!(denials, 2, "{recs:#?}");

    let jobs = json(&node.sovctl(
        "hyd-speech",
        &["--json", "job", "list", "--lease", internal],
    ));
    let job = jobs["jobs"][0]["id"].as_str().expect("a job").to_owned();
    let by_auditor = node.sovctl("auditor", &["job", "logs", "--lease", internal, &job]);
    refused(&by_auditor, 2, "may not read a job's output");
}

#[test]
fn cp_round_trips_through_a_job_and_refuses_strangers() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    let (lb, _) = lease(&node, "eu-bio");
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir(local.path().join("src")).unwrap();
    let src = local.path().join("src/data.bin");
    random_file(&src, 20);

    let dst = format!("{la}:datasets/in/data.bin");
    let up = node.sovctl("hyd-speech", &["cp", src.to_str().unwrap(), &dst]);
    assert!(e2e::ok(&up).contains(&format!("{}", 20 << 20)), "{up:?}");
    let script = "sha256sum datasets/in/data.bin | cut -d' ' -f1; \
                  stat -c '%U %a' datasets/in/data.bin datasets/in; \
                  head -c 5000000 /dev/urandom > result.bin";
    let (code, out) = run(&node, "hyd-speech", &la, script);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], sha256(&src), "{out}");
    assert!(
        lines[1].ends_with(" 600") && lines[2].ends_with(" 700"),
        "{out}"
    );
    assert!(
        !lines[1].starts_with("root"),
        "owned by the lease's uid: {out}"
    );

    let back = local.path().join("result.bin");
    let (_, sum) = run(
        &node,
        "hyd-speech",
        &la,
        "sha256sum result.bin | cut -d' ' -f1",
    );
    e2e::ok(&node.sovctl(
        "hyd-speech",
        &["cp", &format!("{la}:result.bin"), back.to_str().unwrap()],
    ));
    assert_eq!(sha256(&back), sum.trim());
    // Into a directory: the file keeps its name; a directory on the node is no file.
    e2e::ok(&node.sovctl(
        "hyd-speech",
        &[
            "cp",
            &format!("{la}:datasets/in/data.bin"),
            local.path().to_str().unwrap(),
        ],
    ));
    assert_eq!(sha256(&local.path().join("data.bin")), sha256(&src));
    let x = local.path().join("x");
    let x = x.to_str().unwrap();
    refused(
        &node.sovctl("hyd-speech", &["cp", &format!("{la}:datasets"), x]),
        2,
        "not a file",
    );
    refused(
        &node.sovctl("hyd-speech", &["cp", &format!("{la}:nope"), x]),
        1,
        "no such file",
    );
    refused(
        &node.sovctl("hyd-speech", &["cp", local.path().to_str().unwrap(), &dst]),
        2,
        "is a directory",
    );
    assert!(!Path::new(x).exists());
    let leftovers: Vec<_> = std::fs::read_dir(local.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 3, "no partial downloads: {leftovers:?}");

    recursive(&node, &la, local.path());
    strangers(&node, &la, &src);
    bad_paths(&node, &la);
    end_and_wait(&node, "hyd-speech", &la);
    let after = node.sovctl("hyd-speech", &["cp", src.to_str().unwrap(), &dst]);
    refused(&after, 1, "has ended");
    refused(
        &node.sovctl("hyd-speech", &["cp", &format!("{la}:result.bin"), x]),
        1,
        "has ended",
    );
    end_and_wait(&node, "eu-bio", &lb);
}

/// `cp -r` uploads a tree's files under their relative paths; a link in it stops it first.
fn recursive(node: &DevNode, la: &str, local: &Path) {
    let tree = local.join("tree");
    std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    std::fs::write(tree.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(tree.join("sub/deeper/b.txt"), "beta\n").unwrap();
    let out = e2e::ok(&node.sovctl(
        "hyd-speech",
        &["cp", "-r", tree.to_str().unwrap(), &format!("{la}:")],
    ));
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, got) = run(
        node,
        "hyd-speech",
        la,
        "cat tree/a.txt tree/sub/deeper/b.txt",
    );
    assert_eq!((code, got.as_str()), (0, "alpha\nbeta\n"));
    std::os::unix::fs::symlink("/etc/passwd", tree.join("link")).unwrap();
    let out = node.sovctl(
        "hyd-speech",
        &["cp", "-r", tree.to_str().unwrap(), &format!("{la}:t2")],
    );
    refused(&out, 2, "link or special file");
    std::fs::remove_dir_all(&tree).unwrap();
}

/// Another tenant sees no such lease; the auditor may not read tenant data at all.
fn strangers(node: &DevNode, la: &str, src: &Path) {
    let other = node.sovctl("eu-bio", &["cp", src.to_str().unwrap(), &format!("{la}:x")]);
    refused(&other, 1, "no lease");
    let x = src.with_file_name("x");
    refused(
        &node.sovctl(
            "eu-bio",
            &["cp", &format!("{la}:result.bin"), x.to_str().unwrap()],
        ),
        1,
        "no lease",
    );
    node.rt().block_on(async {
        let au = node.client("auditor").await.unwrap();
        let (status, _) = au
            .get_bytes(&Client::files_path(la, "result.bin"))
            .await
            .unwrap();
        assert_eq!(status, 403);
        assert_eq!(put_status(&au, la, "x").await, 403);
        let op = node.client("operator").await.unwrap();
        let list = op.list_files(la, "").await.unwrap();
        let names: Vec<&str> = list.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["datasets", "result.bin", "tree"], "{list:?}");
    });
}

/// `..` and absolute paths are 400, whoever asks, and write nothing.
fn bad_paths(node: &DevNode, la: &str) {
    node.rt().block_on(async {
        let c = node.client("hyd-speech").await.unwrap();
        for p in ["../x", "a/../../x", "/etc/cp-probe", "..", "a/\u{0}b"] {
            assert_eq!(put_status(&c, la, p).await, 400, "{p}");
            let (status, _) = c.get_bytes(&Client::files_path(la, p)).await.unwrap();
            assert_eq!(status, 400, "{p}");
        }
    });
    assert!(!Path::new("/etc/cp-probe").exists());
}

#[test]
fn a_symlink_a_job_planted_is_never_followed() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    let (code, out) = run(
        &node,
        "hyd-speech",
        &la,
        "ln -s /etc x && ln -s /etc/passwd p",
    );
    assert_eq!(code, 0, "{out}");
    let passwd = sha256(Path::new("/etc/passwd"));
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("evil");
    std::fs::write(&src, "pwned::0:0::/:/bin/sh\n").unwrap();
    for dst in ["x/passwd", "x/sovctl-cp-probe", "x/new/dir/f", "p"] {
        let out = node.sovctl(
            "hyd-speech",
            &["cp", src.to_str().unwrap(), &format!("{la}:{dst}")],
        );
        refused(&out, 1, "symbolic link");
    }
    assert_eq!(sha256(Path::new("/etc/passwd")), passwd);
    assert!(!Path::new("/etc/sovctl-cp-probe").exists());
    assert!(!Path::new("/etc/new").exists());
    let out = node.sovctl(
        "hyd-speech",
        &[
            "cp",
            &format!("{la}:x/passwd"),
            local.path().join("got").to_str().unwrap(),
        ],
    );
    refused(&out, 1, "symbolic link");
    assert!(!local.path().join("got").exists());
    end_and_wait(&node, "hyd-speech", &la);
}

#[test]
fn an_upload_over_the_quota_is_refused_before_its_body() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    node.rt().block_on(async {
        let c = node.client("hyd-speech").await.unwrap();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let s = sent.clone();
        let zeros = tokio::io::AsyncReadExt::take(tokio::io::repeat(0), 3 << 30);
        let t = Instant::now();
        let r = c
            .upload(&la, "big/blob", zeros, 3 << 30, move |n| {
                s.store(n, std::sync::atomic::Ordering::Relaxed)
            })
            .await;
        match r {
            Err(ClientError::Api { status: 507, body }) => {
                assert!(body.error.contains("quota"), "{body:?}")
            }
            other => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "body sent"
        );
        let list = c.list_files(&la, "").await.unwrap();
        assert!(list.entries.is_empty(), "{list:?}");
    });
    end_and_wait(&node, "hyd-speech", &la);
}

/// MB/s of `sovctl cp` of 1 GiB into scratch over loopback mTLS, and of a plain `cp` of the
/// same file into the same encrypted directory. Run with `--ignored --nocapture`.
#[test]
#[ignore]
fn bench_cp_one_gib() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    // The source in memory (tmpfs), so both copies read it alike and only one copy of a
    // GiB at a time lands on the node's disk.
    let local = tempfile::tempdir_in("/dev/shm").unwrap();
    let src = local.path().join("gib.bin");
    random_file(&src, 1024);
    let (_, dir) = run(&node, "hyd-speech", &la, "pwd");
    let scratch = PathBuf::from(dir.trim());
    let mbs = |t: Duration| (1u64 << 30) as f64 / 1e6 / t.as_secs_f64();

    sync();
    let t = Instant::now();
    e2e::ok(&node.sovctl(
        "hyd-speech",
        &["cp", src.to_str().unwrap(), &format!("{la}:a.bin")],
    ));
    sync();
    let ours = t.elapsed();
    std::fs::remove_file(scratch.join("a.bin")).unwrap();
    sync();
    let t = Instant::now();
    let out = Command::new("cp")
        .arg(&src)
        .arg(scratch.join("b.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    sync();
    let plain = t.elapsed();
    println!(
        "sovctl cp: {:.0} MB/s ({ours:?}); plain cp: {:.0} MB/s ({plain:?}); ratio {:.2}",
        mbs(ours),
        mbs(plain),
        plain.as_secs_f64() / ours.as_secs_f64()
    );
    end_and_wait(&node, "hyd-speech", &la);
}

fn sync() {
    Command::new("sync").status().unwrap();
}
