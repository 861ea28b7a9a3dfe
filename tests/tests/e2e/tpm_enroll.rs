//! Enrolling a node's attestation key against its TPM maker's EK certificate, with the real
//! binaries and a software TPM manufactured as a maker would (`swtpm_setup --create-ek-cert`,
//! its local CA standing in for the maker's): `hostd tpm-identity`, `sovctl attest
//! tpm-challenge`, `hostd tpm-activate`, `sovctl attest enroll --tpm-identity`.

use e2e::bin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tpm::swtpm::{manufacture, LocalCa, Swtpm};

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(bin(program)).args(args).output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A manufactured TPM, started.
fn tpm(dir: &Path, name: &str, ca: &LocalCa) -> Swtpm {
    let state = dir.join(name);
    manufacture(&state, ca).unwrap();
    Swtpm::start(&state).unwrap()
}

struct Enroller {
    dir: PathBuf,
    ca: LocalCa,
    authority: PathBuf,
}

impl Enroller {
    fn ca_args(&self) -> Vec<String> {
        vec![
            "--tpm-root".into(),
            self.ca.root_pem().display().to_string(),
            "--tpm-intermediate".into(),
            self.ca.issuer_pem().display().to_string(),
        ]
    }

    fn challenge(&self, identity: &Path, tag: &str) -> (Output, PathBuf, PathBuf) {
        let challenge = self.dir.join(format!("challenge-{tag}.json"));
        let secret = self.dir.join(format!("secret-{tag}"));
        let mut args = vec![
            "attest".to_string(),
            "tpm-challenge".into(),
            "--identity".into(),
            s(identity).into(),
            "--out".into(),
            s(&challenge).into(),
            "--secret-out".into(),
            s(&secret).into(),
        ];
        args.extend(self.ca_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        (run("sovctl", &args), challenge, secret)
    }

    fn enroll(&self, identity: &Path, secret: &Path, answer: &str, out: &Path) -> Output {
        let mut args = vec![
            "attest",
            "enroll",
            "--authority-key",
            s(&self.authority),
            "--node-key",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.push("ab".repeat(32));
        for a in [
            "--node-name",
            "node-hyd-07",
            "--jurisdiction",
            "IN-TG",
            "--facility",
            "HYD1",
            "--tpm-identity",
            s(identity),
            "--tpm-secret",
            s(secret),
            "--tpm-answer",
            answer,
            "--out",
            s(out),
        ] {
            args.push(a.into());
        }
        args.extend(self.ca_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run("sovctl", &args)
    }
}

fn identity_of(sw: &Swtpm, path: &Path) -> serde_json::Value {
    let out = run("hostd", &["tpm-identity", "--swtpm-socket", s(sw.socket())]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(path, &out.stdout).unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn activate(sw: &Swtpm, challenge: &Path) -> Output {
    run(
        "hostd",
        &[
            "tpm-activate",
            "--challenge",
            s(challenge),
            "--swtpm-socket",
            s(sw.socket()),
        ],
    )
}

#[test]
fn an_ak_is_enrolled_once_its_tpm_answers_the_challenge_under_its_certified_ek() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = LocalCa {
        dir: dir.join("ca"),
    };
    let node = tpm(dir, "node", &ca);
    let other = tpm(dir, "other", &ca);
    let authority = dir.join("ea.key");
    let out = run("sovctl", &["attest", "keygen", "--out", s(&authority)]);
    assert!(out.status.success(), "{}", text(&out));
    let e = Enroller {
        dir: dir.to_owned(),
        ca,
        authority,
    };

    let identity = dir.join("identity.json");
    let id = identity_of(&node, &identity);
    let (out, challenge, secret) = e.challenge(&identity, "1");
    assert!(out.status.success(), "{}", text(&out));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Another TPM, though certified by the same maker, cannot answer.
    let refused = activate(&other, &challenge);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("did not release"),
        "{}",
        text(&refused)
    );

    // A second challenge never overwrites the first one's secret, nor its challenge.
    let first = std::fs::read(&challenge).unwrap();
    let (again, ..) = e.challenge(&identity, "1");
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists"), "{}", text(&again));
    assert_eq!(std::fs::read(&challenge).unwrap(), first);

    let answer = activate(&node, &challenge);
    assert!(answer.status.success(), "{}", text(&answer));
    let answer = String::from_utf8(answer.stdout).unwrap().trim().to_string();
    assert_eq!(answer.len(), 64);

    // A wrong answer binds nothing and keeps the secret for the right one.
    let cert = dir.join("enrollment.json");
    let mut wrong = answer.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let out = e.enroll(
        &identity,
        &secret,
        std::str::from_utf8(&wrong).unwrap(),
        &cert,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not the challenge's secret"),
        "{}",
        text(&out)
    );
    assert!(!cert.exists() && secret.exists());

    let out = e.enroll(&identity, &secret, &answer, &cert);
    assert!(out.status.success(), "{}", text(&out));
    let enrolled: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cert).unwrap()).unwrap();
    let claims = &enrolled["claims"];
    assert_eq!(claims["tpm_ak"], id["ak_public"]);
    let ek_cert = hex::decode(id["ek_certificate"].as_str().unwrap()).unwrap();
    use sha2::Digest;
    assert_eq!(
        claims["tpm_ek_certificate_sha256"],
        hex::encode(sha2::Sha256::digest(&ek_cert))
    );
    // The secret is spent: the same answer enrols nothing more.
    assert!(!secret.exists());
    let again = e.enroll(&identity, &secret, &answer, &dir.join("again.json"));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
}

#[test]
fn a_challenge_is_refused_for_an_identity_that_does_not_check_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let node = tpm(
        dir,
        "node",
        &LocalCa {
            dir: dir.join("maker"),
        },
    );
    // The enroller trusts another maker.
    let e = Enroller {
        dir: dir.to_owned(),
        ca: {
            let ca = LocalCa {
                dir: dir.join("trusted"),
            };
            drop(tpm(dir, "made-by-trusted", &ca));
            ca
        },
        authority: dir.join("unused.key"),
    };
    let identity = dir.join("identity.json");
    let mut id = identity_of(&node, &identity);
    let (out, _, secret) = e.challenge(&identity, "untrusted");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("does not verify up to a trusted"),
        "{}",
        text(&out)
    );
    assert!(!secret.exists());
    // An AK outside the profile.
    id["ak_public"] = serde_json::Value::String("0023".into());
    std::fs::write(&identity, id.to_string()).unwrap();
    let (out, _, _) = e.challenge(&identity, "bad-ak");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("attestation key"), "{}", text(&out));
}

#[test]
fn a_tpm_without_an_ek_certificate_in_nv_takes_one_from_a_file_and_the_enroller_checks_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bare = Swtpm::start(&dir.join("bare")).unwrap();
    let out = run(
        "hostd",
        &["tpm-identity", "--swtpm-socket", s(bare.socket())],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("no EK certificate"), "{}", text(&out));

    // A certificate given in a file stands in for NV memory: the same identity.
    let ca = LocalCa {
        dir: dir.join("ca"),
    };
    let made = tpm(dir, "made", &ca);
    let from_nv = identity_of(&made, &dir.join("nv.json"));
    let der = dir.join("ek.der");
    std::fs::write(
        &der,
        hex::decode(from_nv["ek_certificate"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    let from_file = run(
        "hostd",
        &[
            "tpm-identity",
            "--ek-certificate",
            s(&der),
            "--swtpm-socket",
            s(made.socket()),
        ],
    );
    assert!(from_file.status.success(), "{}", text(&from_file));
    let from_file: serde_json::Value = serde_json::from_slice(&from_file.stdout).unwrap();
    assert_eq!(from_file, from_nv);

    // Given to another TPM, that certificate names another EK: the enroller refuses it.
    let identity = dir.join("bare.json");
    let out = run(
        "hostd",
        &[
            "tpm-identity",
            "--ek-certificate",
            s(&der),
            "--swtpm-socket",
            s(bare.socket()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&identity, &out.stdout).unwrap();
    let e = Enroller {
        dir: dir.to_owned(),
        ca,
        authority: dir.join("unused.key"),
    };
    let (out, _, secret) = e.challenge(&identity, "bare");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("the TPM's EK has"), "{}", text(&out));
    assert!(!secret.exists());
    let out = run(
        "hostd",
        &[
            "tpm-identity",
            "--ek-certificate",
            s(&identity),
            "--swtpm-socket",
            s(bare.socket()),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not a certificate file"),
        "{}",
        text(&out)
    );
}
