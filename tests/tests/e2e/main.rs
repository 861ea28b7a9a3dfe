//! End-to-end tests: the real `hostd` (dev mode: dev PKI, fake NVML library, sled on disk) and
//! the real `sovctl`, over real mutual TLS on loopback. One test binary, one module per story.

mod api_input;
mod attestation;
mod authz;
mod concurrency;
mod crash;
mod devmode;
mod disk;
mod faults;
mod files;
mod jobs;
mod story;
mod tpm_enroll;
mod usage_pages;

use serde_json::Value;

/// Amount in paise for a lease from `start_ms` to `end_ms` at `rate` paise/h, computed
/// independently of hostd: split at UTC hour boundaries, round each piece half up, add.
pub fn expected_paise(start_ms: i64, end_ms: i64, rate: u64) -> u64 {
    let mut total = 0u64;
    let mut t = start_ms;
    while t < end_ms {
        let boundary = (t / 3_600_000 + 1) * 3_600_000;
        let piece_end = boundary.min(end_ms);
        let ms = (piece_end - t) as u128;
        total += ((ms * rate as u128 + 1_800_000) / 3_600_000) as u64;
        t = piece_end;
    }
    total
}

pub fn json(out: &std::process::Output) -> Value {
    let text = e2e::ok(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Creates the two dev tenants.
pub fn create_tenants(node: &e2e::DevNode) {
    e2e::ok(&node.sovctl(
        "operator",
        &[
            "tenant",
            "create",
            "--id",
            "hyd-speech",
            "--name",
            "Hyderabad Speech Labs",
            "--jurisdiction",
            "IN-TG",
        ],
    ));
    e2e::ok(&node.sovctl(
        "operator",
        &[
            "tenant",
            "create",
            "--id",
            "eu-bio",
            "--name",
            "EU Bio GmbH",
            "--jurisdiction",
            "DE",
        ],
    ));
}

/// Polls `f` every 50 ms until it returns `Some`, for at most `secs` seconds.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Leases `gpus` GPUs of `model` for `tenant`, asked with `profile`'s certificate.
pub fn lease(node: &e2e::DevNode, profile: &str, tenant: &str, gpus: u32, model: &str) -> Value {
    let gpus = gpus.to_string();
    json(&node.sovctl(
        profile,
        &[
            "--json", "lease", "create", "--tenant", tenant, "--gpus", &gpus, "--model", model,
        ],
    ))
}

/// The auditor's job: export with the auditor profile (plus `extra` export flags), then
/// verify offline pinning the node's log key. Returns the verify report.
pub fn export_and_verify(node: &e2e::DevNode, export: &std::path::Path, extra: &[&str]) -> String {
    let out = export.to_str().expect("utf-8 path");
    let mut args = vec!["audit", "export", "--out", out];
    args.extend_from_slice(extra);
    e2e::ok(&node.sovctl("auditor", &args));
    let vkey = node.dir.join("state/log.vkey");
    e2e::ok(&node.sovctl(
        "",
        &[
            "audit",
            "verify",
            out,
            "--vkey",
            vkey.to_str().expect("utf-8 path"),
            "--quiet",
        ],
    ))
}

/// A lease of one H100 for `hyd-speech` that runs briefly (an hour or so of dev time at
/// `--time-scale 3600`) and ends, so the ledger holds usage records.
pub fn lease_some_time(node: &e2e::DevNode) {
    create_tenants(node);
    let l = lease(node, "operator", "hyd-speech", 1, "H100");
    let id = l["id"].as_str().expect("lease id").to_owned();
    std::thread::sleep(std::time::Duration::from_millis(300));
    json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
}

/// Offline verification that `export` extends the log whose checkpoint is in `previous`
/// (pinning the node's key), as an auditor holding an older checkpoint checks.
pub fn verify_extends(node: &e2e::DevNode, export: &std::path::Path, previous: &std::path::Path) {
    let vkey = node.dir.join("state/log.vkey");
    e2e::ok(&node.sovctl(
        "",
        &[
            "audit",
            "verify",
            export.to_str().expect("utf-8 path"),
            "--vkey",
            vkey.to_str().expect("utf-8 path"),
            "--previous",
            previous.to_str().expect("utf-8 path"),
            "--quiet",
        ],
    ));
}
