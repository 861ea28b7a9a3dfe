//! `sovctl policy ...`: check, sign and explain data-residency policies, and create the policy
//! authority key. All offline; the policy library does the work, this module does the files.
//!
//! Exit codes: 0 valid / allowed, 1 invalid / denied / refused, 2 usage error (missing or
//! unreadable file, malformed request or key file, refusing to overwrite a key).

use attest::report::report;
use policy::bundle::{Bundle, BundleError, SignerKey, VerifierKey};
use policy::{compile_egress, decide, Policy, Request};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use zeroize::Zeroizing;

/// `sovctl policy` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCmd {
    /// Validate a policy file and print a summary (and verify its signature if given).
    Check {
        /// Policy file (TOML).
        file: PathBuf,
        /// Detached signature note to verify (e.g. FILE.sig); requires --authority.
        #[arg(long, requires = "authority")]
        signature: Option<PathBuf>,
        /// Policy authority verifier key file (name+id+base64).
        #[arg(long)]
        authority: Option<PathBuf>,
    },
    /// Sign a policy file with the policy authority key; writes FILE.sig.
    Sign {
        /// Policy file (TOML); its [policy] version is the version signed.
        file: PathBuf,
        /// Authority signer key file (PRIVATE+KEY+...), mode 0600.
        #[arg(long)]
        key: PathBuf,
        /// Where to write the signature note (default: FILE.sig).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the decision for a request (JSON file) and the reason for each check.
    Explain {
        /// Policy file (TOML).
        file: PathBuf,
        /// Request file (JSON), e.g. {"action": "place", "tenant": ..., "dataset": ..., "node": ...}.
        #[arg(long)]
        request: PathBuf,
        /// Print the decision as JSON (as logged to the ledger) instead of sentences.
        #[arg(long)]
        json: bool,
    },
    /// Print the egress allow-list a workload's network filter enforces.
    Egress {
        /// Policy file (TOML).
        file: PathBuf,
        /// Tenant id.
        #[arg(long)]
        tenant: String,
        /// Classification of the data the workload handles.
        #[arg(long)]
        classification: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a policy authority key pair: OUT (private, mode 0600) and OUT.pub (its verifier
    /// key), as every sovctl keygen.
    Keygen {
        /// Key name, e.g. policy-authority.example.in (no spaces or '+').
        #[arg(long)]
        name: String,
        /// Private key file (its verifier key goes to OUT.pub); refuses to overwrite either.
        #[arg(long)]
        out: PathBuf,
    },
}

/// What a command printed and how it ended; `run` prints it, tests inspect it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code (0, 1 or 2).
    pub code: u8,
    /// Text for standard output.
    pub stdout: String,
    /// Text for standard error.
    pub stderr: String,
}

impl Outcome {
    fn ok(stdout: String) -> Self {
        Outcome {
            code: 0,
            stdout,
            stderr: String::new(),
        }
    }
    fn fail(stdout: String, stderr: String) -> Self {
        Outcome {
            code: 1,
            stdout,
            stderr,
        }
    }
    fn usage(stderr: String) -> Self {
        Outcome {
            code: 2,
            stdout: String::new(),
            stderr,
        }
    }
}

/// Runs a subcommand, printing its output.
pub fn run(cmd: PolicyCmd) -> ExitCode {
    let out = execute(cmd);
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    ExitCode::from(out.code)
}

/// Runs a subcommand and returns its output without printing.
pub fn execute(cmd: PolicyCmd) -> Outcome {
    match cmd {
        PolicyCmd::Check {
            file,
            signature,
            authority,
        } => check(&file, signature.as_deref(), authority.as_deref()),
        PolicyCmd::Sign { file, key, out } => sign(&file, &key, out.as_deref()),
        PolicyCmd::Explain {
            file,
            request,
            json,
        } => explain(&file, &request, json),
        PolicyCmd::Egress {
            file,
            tenant,
            classification,
            json,
        } => egress(&file, &tenant, &classification, json),
        PolicyCmd::Keygen { name, out } => keygen(&name, &out),
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Outcome> {
    std::fs::read(path).map_err(|e| {
        Outcome::usage(format!(
            "error: cannot read {what} {}: {e}\n",
            path.display(),
            e = report(&e)
        ))
    })
}

/// Reads and loads a policy; Err is the outcome to return (2 unreadable, 1 invalid).
fn load(path: &Path) -> Result<(Vec<u8>, Policy), Outcome> {
    let bytes = read(path, "policy file")?;
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(Outcome::fail(
            String::new(),
            format!(
                "error: {}: policy file is not valid UTF-8\n",
                path.display()
            ),
        ));
    };
    match Policy::from_toml_str(text) {
        Ok(p) => Ok((bytes, p)),
        Err(errs) => {
            let mut s = format!(
                "error: {} is invalid ({} error{}):\n",
                path.display(),
                errs.len(),
                if errs.len() == 1 { "" } else { "s" }
            );
            for e in &errs {
                let _ = writeln!(s, "  {}:{e}", path.display());
            }
            Err(Outcome::fail(String::new(), s))
        }
    }
}

fn summary(path: &Path, p: &Policy) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}: valid", path.display());
    let _ = writeln!(s, "  name:            {}", p.name);
    let _ = writeln!(s, "  version:         {}", p.version);
    let _ = writeln!(s, "  digest:          {}", p.digest());
    let _ = writeln!(s, "  classifications: {}", p.classifications.join(" < "));
    let groups: Vec<String> = p
        .groups
        .iter()
        .map(|(k, v)| format!("{k} ({})", v.len()))
        .collect();
    let _ = writeln!(
        s,
        "  groups:          {}",
        if groups.is_empty() {
            "-".to_string()
        } else {
            groups.join(", ")
        }
    );
    let _ = writeln!(s, "  tenants:         {}", p.tenants.len());
    let _ = writeln!(s, "  endpoints:       {}", p.endpoints.len());
    let audit = p
        .rules
        .iter()
        .filter(|r| r.mode == policy::Mode::Audit)
        .count();
    let _ = writeln!(
        s,
        "  rules:           {} ({} enforce, {audit} audit)",
        p.rules.len(),
        p.rules.len() - audit
    );
    for r in &p.rules {
        let actions: Vec<&str> = r.actions().iter().map(|a| a.as_str()).collect();
        let classes: Vec<&str> = p
            .classifications
            .iter()
            .enumerate()
            .filter(|(i, _)| r.has_class(*i))
            .map(|(_, c)| c.as_str())
            .collect();
        let tenants = r
            .tenants
            .as_ref()
            .map(|t| format!(" for {}", t.join(", ")))
            .unwrap_or_default();
        let allow = match (r.allow_home, r.allow_text.is_empty()) {
            (true, true) => "home".to_string(),
            (true, false) => format!("{}, home", r.allow_text),
            _ => r.allow_text.clone(),
        };
        let _ = writeln!(
            s,
            "    {:<32} {} {} of {}{tenants} in {allow}",
            r.id,
            r.mode.as_str(),
            actions.join("/"),
            classes.join("/"),
        );
    }
    s
}

fn check(file: &Path, signature: Option<&Path>, authority: Option<&Path>) -> Outcome {
    let (bytes, p) = match load(file) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let mut out = summary(file, &p);
    if let (Some(sig_path), Some(auth_path)) = (signature, authority) {
        let sig = match read(sig_path, "signature file") {
            Ok(s) => s,
            Err(o) => return o,
        };
        let vkey = match read_vkey(auth_path) {
            Ok(k) => k,
            Err(o) => return o,
        };
        match policy::verify_bundle(
            Bundle {
                policy: &bytes,
                signature: &sig,
            },
            &vkey,
            None,
        ) {
            Ok(_) => {
                let _ = writeln!(
                    out,
                    "  signature:       valid, by {} (version {})",
                    vkey.name(),
                    p.version
                );
            }
            Err(e) => {
                return Outcome::fail(
                    out,
                    format!(
                        "error: {}: signature refused: {e}\n",
                        sig_path.display(),
                        e = report(&e)
                    ),
                )
            }
        }
    } else if authority.is_some() {
        let _ = writeln!(out, "  signature:       not checked (give --signature)");
    }
    Outcome::ok(out)
}

fn read_vkey(path: &Path) -> Result<VerifierKey, Outcome> {
    let bytes = read(path, "authority key file")?;
    let text = String::from_utf8_lossy(&bytes);
    VerifierKey::parse(text.trim())
        .map_err(|e| Outcome::usage(format!("error: {}: {e}\n", path.display(), e = report(&e))))
}

fn sig_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".sig");
    PathBuf::from(s)
}

fn sign(file: &Path, key_path: &Path, out: Option<&Path>) -> Outcome {
    let (bytes, p) = match load(file) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if let Err(o) = check_private_mode(key_path) {
        return o;
    }
    let key_bytes = match read(key_path, "signer key file") {
        Ok(b) => Zeroizing::new(b),
        Err(o) => return o,
    };
    let Ok(key_text) = std::str::from_utf8(&key_bytes) else {
        return Outcome::usage(format!(
            "error: {}: not a signer key (not UTF-8)\n",
            key_path.display()
        ));
    };
    let key = match SignerKey::parse(key_text.trim()) {
        Ok(k) => k,
        Err(e) => {
            return Outcome::usage(format!(
                "error: {}: {e}\n",
                key_path.display(),
                e = report(&e)
            ))
        }
    };
    let note = match policy::sign_bundle(&bytes, &key) {
        Ok(n) => n,
        Err(BundleError::InvalidPolicy(_)) | Err(BundleError::NotUtf8) => {
            return Outcome::fail(
                String::new(),
                format!("error: {} is invalid\n", file.display()),
            )
        }
        Err(e) => return Outcome::fail(String::new(), format!("error: {e}\n", e = report(&e))),
    };
    let dest = out.map(Path::to_path_buf).unwrap_or_else(|| sig_path(file));
    if let Err(e) = write_replace(&dest, note.as_bytes()) {
        return Outcome::usage(format!(
            "error: cannot write {}: {e}\n",
            dest.display(),
            e = report(&e)
        ));
    }
    Outcome::ok(format!(
        "signed {} version {} ({}) by {}\nwrote {}\n",
        p.name,
        p.version,
        p.digest(),
        key.name(),
        dest.display()
    ))
}

/// Writes via a temporary file and rename, so a crash never leaves a half-written signature.
fn write_replace(dest: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = dest.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dest)
}

/// The signer key must follow the key-file rules (regular file, no group/other access).
fn check_private_mode(path: &Path) -> Result<(), Outcome> {
    keyfile::read_private(path)
        .map(drop)
        .map_err(|e| Outcome::usage(format!("error: {e}\n", e = report(&e))))
}

fn explain(file: &Path, request: &Path, json: bool) -> Outcome {
    let (_, p) = match load(file) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let req_bytes = match read(request, "request file") {
        Ok(b) => b,
        Err(o) => return o,
    };
    let req: Request = match serde_json::from_slice(&req_bytes) {
        Ok(r) => r,
        Err(e) => {
            return Outcome::usage(format!(
                "error: {}: not a request: {e}\n",
                request.display(),
                e = report(&e)
            ))
        }
    };
    let d = decide(&p, &req);
    let out = if json {
        match serde_json::to_string_pretty(&d) {
            Ok(s) => s + "\n",
            Err(e) => return Outcome::fail(String::new(), format!("error: {e}\n", e = report(&e))),
        }
    } else {
        let mut s = String::new();
        let verdict = match (d.allowed, d.violation) {
            (true, false) => "ALLOWED",
            (true, true) => "ALLOWED (audit-mode violation)",
            (false, _) => "DENIED",
        };
        let _ = writeln!(s, "{verdict}: {} for tenant {}", d.action, req.tenant());
        for r in &d.reasons {
            let _ = writeln!(s, "  - {r}");
        }
        let rules = if d.matched_rules.is_empty() {
            "none (deny by default)".to_string()
        } else {
            d.matched_rules.join(", ")
        };
        let _ = writeln!(s, "  rules:  {rules}");
        let _ = writeln!(
            s,
            "  policy: {} version {} {}",
            p.name, p.version, d.policy_digest
        );
        s
    };
    if d.allowed {
        Outcome::ok(out)
    } else {
        Outcome::fail(out, String::new())
    }
}

fn egress(file: &Path, tenant: &str, classification: &str, json: bool) -> Outcome {
    let (_, p) = match load(file) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let l = compile_egress(&p, tenant, classification);
    let mut s = String::new();
    if json {
        match serde_json::to_string_pretty(&l) {
            Ok(j) => s = j + "\n",
            Err(e) => return Outcome::fail(String::new(), format!("error: {e}\n", e = report(&e))),
        }
    } else {
        let rules = if l.rules.is_empty() {
            "none (deny by default)".to_string()
        } else {
            format!("{} ({})", l.rules.join(", "), l.mode.as_str())
        };
        let _ = writeln!(
            s,
            "# egress allow-list for tenant {tenant}, {classification} data"
        );
        let _ = writeln!(s, "# rules: {rules}; policy {}", l.policy_digest);
        for c in &l.cidrs {
            let _ = writeln!(s, "{c}");
        }
        for h in &l.hosts {
            let _ = writeln!(s, "host {h}");
        }
    }
    Outcome::ok(s)
}

fn keygen(name: &str, out: &Path) -> Outcome {
    use rand_core::{OsRng, RngCore};
    let mut seed = Zeroizing::new([0u8; 32]);
    OsRng.fill_bytes(seed.as_mut());
    let key = match SignerKey::from_seed(name, &seed) {
        Ok(k) => k,
        Err(e) => return Outcome::usage(format!("error: {e}\n", e = report(&e))),
    };
    // The one key-file convention (keyfile): the private key at OUT, its public half at
    // OUT.pub (here a note verifier key line), neither ever overwritten.
    let key_path = out.to_path_buf();
    let vkey_path = keyfile::public_key_path(out);
    for p in [&key_path, &vkey_path] {
        if p.exists() {
            return Outcome::usage(format!(
                "error: {} exists; refusing to overwrite a key\n",
                p.display()
            ));
        }
    }
    let encoded = key.encode();
    if let Err(e) = keyfile::write_new_private(&key_path, encoded.as_bytes()) {
        return Outcome::usage(format!(
            "error: cannot write {}: {e}\n",
            key_path.display(),
            e = report(&e)
        ));
    }
    let vkey = key.verifier().encode();
    if let Err(e) = keyfile::write_new_public(&vkey_path, format!("{vkey}\n").as_bytes()) {
        return Outcome::usage(format!(
            "error: cannot write {}: {e}\n",
            vkey_path.display(),
            e = report(&e)
        ));
    }
    Outcome::ok(format!(
        "wrote {} (private, mode 0600: keep it offline)\nwrote {} (give this to nodes and auditors)\n{vkey}\n",
        key_path.display(),
        vkey_path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../../../policy/examples/seed-hyderabad.toml");

    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new() -> Self {
            Dir(tempfile::tempdir().expect("tempdir"))
        }
        fn file(&self, name: &str, contents: &str) -> PathBuf {
            let p = self.0.path().join(name);
            std::fs::write(&p, contents).expect("write test file");
            p
        }
        fn path(&self, name: &str) -> PathBuf {
            self.0.path().join(name)
        }
    }

    fn place_request(jur: &str) -> String {
        format!(
            r#"{{"action": "place", "tenant": "vaani-speech",
                "dataset": {{"id": "telugu-asr-raw", "classification": "restricted", "owner": "vaani-speech", "origin": "IN-TS"}},
                "node": {{"id": "gpu-07", "jurisdiction": "{jur}", "facility": "f1", "attestation": "affirming",
                          "evidence_age_s": 120, "cc_mode": true, "image_version": "1.4.2"}}}}"#
        )
    }

    #[test]
    fn check_valid_and_invalid() {
        let d = Dir::new();
        let good = d.file("p.toml", SEED);
        let o = execute(PolicyCmd::Check {
            file: good,
            signature: None,
            authority: None,
        });
        assert_eq!(o.code, 0, "{o:?}");
        assert!(o.stdout.contains("version:         1"));
        assert!(o.stdout.contains("restricted-stays-in-india"));
        assert!(o
            .stdout
            .contains("public < internal < confidential < restricted"));

        let bad = d.file("bad.toml", &SEED.replace("\"IN\"]", "\"UK\"]"));
        let o = execute(PolicyCmd::Check {
            file: bad.clone(),
            signature: None,
            authority: None,
        });
        assert_eq!(o.code, 1);
        assert!(
            o.stderr.contains("the United Kingdom is GB"),
            "{}",
            o.stderr
        );
        assert!(o.stderr.contains(&format!("{}:line ", bad.display())));

        let o = execute(PolicyCmd::Check {
            file: d.path("missing.toml"),
            signature: None,
            authority: None,
        });
        assert_eq!(o.code, 2);
    }

    #[test]
    fn keygen_sign_and_check_signature() {
        let d = Dir::new();
        let prefix = d.path("authority.key");
        let o = execute(PolicyCmd::Keygen {
            name: "policy-authority.example.in".into(),
            out: prefix.clone(),
        });
        assert_eq!(o.code, 0, "{o:?}");
        let key = d.path("authority.key");
        let vkey = d.path("authority.key.pub");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        // No overwrite.
        let o = execute(PolicyCmd::Keygen {
            name: "x".into(),
            out: prefix,
        });
        assert_eq!(o.code, 2);

        let file = d.file("p.toml", SEED);
        let o = execute(PolicyCmd::Sign {
            file: file.clone(),
            key: key.clone(),
            out: None,
        });
        assert_eq!(o.code, 0, "{o:?}");
        let sig = d.path("p.toml.sig");
        assert!(std::fs::read_to_string(&sig)
            .unwrap()
            .starts_with("sovereign-host policy bundle v1\nname hyd-seed\nversion 1\n"));

        let o = execute(PolicyCmd::Check {
            file: file.clone(),
            signature: Some(sig.clone()),
            authority: Some(vkey.clone()),
        });
        assert_eq!(o.code, 0, "{o:?}");
        assert!(o.stdout.contains("signature:       valid"));

        // Tampered policy: refused.
        std::fs::write(&file, SEED.replace("24h", "48h")).unwrap();
        let o = execute(PolicyCmd::Check {
            file,
            signature: Some(sig),
            authority: Some(vkey),
        });
        assert_eq!(o.code, 1);
        assert!(
            o.stderr.contains("does not match the signed digest"),
            "{}",
            o.stderr
        );
    }

    #[cfg(unix)]
    #[test]
    fn sign_refuses_a_world_readable_key() {
        use std::os::unix::fs::PermissionsExt;
        let d = Dir::new();
        let key = SignerKey::from_seed("a", &[1; 32]).unwrap();
        let kp = d.file("k.key", key.encode().as_str());
        std::fs::set_permissions(&kp, std::fs::Permissions::from_mode(0o644)).unwrap();
        let o = execute(PolicyCmd::Sign {
            file: d.file("p.toml", SEED),
            key: kp,
            out: None,
        });
        assert_eq!(o.code, 2);
        assert!(o.stderr.contains("chmod 600"));
    }

    #[test]
    fn explain_allowed_denied_and_bad_request() {
        let d = Dir::new();
        let file = d.file("p.toml", SEED);
        let o = execute(PolicyCmd::Explain {
            file: file.clone(),
            request: d.file("sg.json", &place_request("SG")),
            json: false,
        });
        assert_eq!(o.code, 1);
        assert!(o
            .stdout
            .starts_with("DENIED: place for tenant vaani-speech\n"));
        assert!(o.stdout.contains(
            "  - denied: dataset telugu-asr-raw is restricted; node gpu-07 is in SG, rule restricted-stays-in-india allows only IN\n"
        ));

        let o = execute(PolicyCmd::Explain {
            file: file.clone(),
            request: d.file("in.json", &place_request("IN-TS")),
            json: true,
        });
        assert_eq!(o.code, 0, "{o:?}");
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["allowed"], true);
        assert!(v["policy_digest"].as_str().unwrap().starts_with("sha256:"));

        let o = execute(PolicyCmd::Explain {
            file,
            request: d.file("bad.json", r#"{"action": "teleport"}"#),
            json: false,
        });
        assert_eq!(o.code, 2);
    }

    #[test]
    fn egress_list() {
        let d = Dir::new();
        let file = d.file("p.toml", SEED);
        let o = execute(PolicyCmd::Egress {
            file,
            tenant: "vaani-speech".into(),
            classification: "restricted".into(),
            json: false,
        });
        assert_eq!(o.code, 0);
        assert!(
            o.stdout
                .contains("\n10.40.0.0/16\n203.0.113.0/25\nfd40::/48\n"),
            "{}",
            o.stdout
        );
        assert!(!o.stdout.contains("198.51.100.0/24"));
    }
}
