//! PCR 11 prediction: what systemd-stub and systemd-pcrphase will have extended into the TPM's
//! PCR 11 when a unified kernel image (UKI) boots, computed at build time so the reference
//! manifest can carry it and a verifier can compare a TPM quote against it.
//!
//! The algorithm is systemd-measure's (systemd 252): starting from 32 zero bytes, for every
//! section the UKI has, in the stub's fixed order (not the PE file's), extend with the SHA-256
//! of the section's name *with* its trailing NUL, then with the SHA-256 of its contents; then
//! each boot phase string (no NUL) as the system reaches it. Extending is
//! `pcr = SHA-256(pcr || SHA-256(data))`. A test checks every phase against
//! `/usr/lib/systemd/systemd-measure` itself.

use sha2::{Digest, Sha256};

/// The UKI sections systemd-stub measures, in the order it measures them. `.pcrsig` is never
/// measured (it carries signatures over these very values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    /// The kernel.
    Linux,
    /// The os-release file.
    Osrel,
    /// The kernel command line.
    Cmdline,
    /// The initrd.
    Initrd,
    /// A boot splash image.
    Splash,
    /// A device tree.
    Dtb,
    /// The public key that signed `.pcrsig`.
    Pcrpkey,
}

impl Section {
    /// The PE section name.
    pub fn name(self) -> &'static str {
        match self {
            Section::Linux => ".linux",
            Section::Osrel => ".osrel",
            Section::Cmdline => ".cmdline",
            Section::Initrd => ".initrd",
            Section::Splash => ".splash",
            Section::Dtb => ".dtb",
            Section::Pcrpkey => ".pcrpkey",
        }
    }
}

/// The boot phases systemd-pcrphase measures into PCR 11, in order.
pub const BOOT_PHASES: [&str; 4] = ["enter-initrd", "leave-initrd", "sysinit", "ready"];

/// PCR 11 after one boot phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    /// The phases reached, `:`-joined as systemd-measure prints them (`enter-initrd:leave-initrd`).
    pub phase: String,
    /// The PCR value (SHA-256 bank).
    pub pcr11: [u8; 32],
}

fn extend(pcr: &mut [u8; 32], data: &[u8]) {
    let mut h = Sha256::new();
    h.update(*pcr);
    h.update(Sha256::digest(data));
    *pcr = h.finalize().into();
}

/// PCR 11 after each boot phase of a UKI with `sections` (any order), as systemd 252's stub
/// measures it: of two sections of one name the last is the one it finds, and an empty
/// section is skipped (`systemd-measure` skips it too). [`crate::uki::assemble`] refuses both,
/// so for a built image every section counts once.
pub fn predict_pcr11(sections: &[(Section, &[u8])]) -> [Prediction; BOOT_PHASES.len()] {
    let mut ordered: Vec<(Section, &[u8])> = Vec::new();
    for (s, data) in sections {
        ordered.retain(|(o, _)| o != s);
        if !data.is_empty() {
            ordered.push((*s, data));
        }
    }
    ordered.sort_by_key(|(s, _)| *s);
    let mut pcr = [0u8; 32];
    for (s, data) in &ordered {
        let mut name = s.name().as_bytes().to_vec();
        name.push(0);
        extend(&mut pcr, &name);
        extend(&mut pcr, data);
    }
    std::array::from_fn(|i| {
        extend(&mut pcr, BOOT_PHASES[i].as_bytes());
        Prediction {
            phase: BOOT_PHASES[..=i].join(":"),
            pcr11: pcr,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn hexes(p: &[Prediction]) -> Vec<String> {
        p.iter().map(|x| hex::encode(x.pcr11)).collect()
    }

    /// Values printed by systemd 252's `systemd-measure calculate` for these four sections.
    #[test]
    fn matches_systemd_measure_252_on_a_fixed_vector() {
        let p = predict_pcr11(&[
            (Section::Cmdline, b"console=ttyS0"),
            (Section::Linux, b"KERNEL"),
            (Section::Initrd, b"INITRD"),
            (Section::Osrel, b"ID=x\n"),
        ]);
        assert_eq!(p[0].phase, "enter-initrd");
        assert_eq!(p[3].phase, "enter-initrd:leave-initrd:sysinit:ready");
        assert_eq!(
            hexes(&p),
            [
                "b657fed109ac58d62fb061f09fa39195b0f96ede5cd1fbd2ad6aac9850b589c4",
                "1626789fba825cde0e21c7c88e69d7ea8c211267e0d43bee267dbeadbcf752f8",
                "440affd3f58dc7f0eb638cc93935648f964dc6065627022dd45664296c5f4bb3",
                "b8aadf05c58f5b6dad997003f50451f9a301110b341a75c9fe5282ecc7a3af67",
            ]
        );
    }

    #[test]
    fn one_changed_byte_of_the_command_line_changes_every_phase() {
        let base = predict_pcr11(&[(Section::Linux, b"K"), (Section::Cmdline, b"quiet")]);
        let changed = predict_pcr11(&[(Section::Linux, b"K"), (Section::Cmdline, b"quieT")]);
        for (a, b) in base.iter().zip(&changed) {
            assert_ne!(a.pcr11, b.pcr11, "{}", a.phase);
        }
    }

    /// What `systemd-measure calculate` prints for these sections, as (phase, hash).
    fn systemd_measure(tool: &Path, files: &[(Section, &str, Vec<u8>)]) -> Vec<(String, String)> {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(tool);
        cmd.args(["calculate", "--bank=sha256", "--json=short"]);
        for (_, name, data) in files {
            let p = dir.path().join(name);
            std::fs::write(&p, data).unwrap();
            cmd.arg(format!("--{name}={}", p.display()));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["sha256"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["phase"].as_str().unwrap().to_owned(),
                    e["hash"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Against systemd-measure itself (Debian's systemd, pulled in by systemd-container, which
    /// `.ci/run` installs), on contents that are not a fixed vector, and with an empty section
    /// (which both skip).
    #[test]
    fn matches_systemd_measure_on_other_contents() {
        let tool = Path::new("/usr/lib/systemd/systemd-measure");
        if !tool.exists() {
            eprintln!("SKIPPED: {} not installed", tool.display());
            return;
        }
        let linux: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for initrd in [vec![0u8; 4097], Vec::new()] {
            let files = [
                (Section::Linux, "linux", linux.clone()),
                (
                    Section::Osrel,
                    "osrel",
                    b"ID=sovereign\nVERSION_ID=0.1\n".to_vec(),
                ),
                (
                    Section::Cmdline,
                    "cmdline",
                    b"lockdown=integrity module.sig_enforce=1".to_vec(),
                ),
                (Section::Initrd, "initrd", initrd),
            ];
            let theirs = systemd_measure(tool, &files);
            let sections: Vec<(Section, &[u8])> =
                files.iter().map(|(s, _, d)| (*s, d.as_slice())).collect();
            let ours: Vec<(String, String)> = predict_pcr11(&sections)
                .into_iter()
                .map(|p| (p.phase, hex::encode(p.pcr11)))
                .collect();
            assert_eq!(ours, theirs);
        }
    }

    /// Of two sections of one name the stub finds the last.
    #[test]
    fn the_last_of_two_sections_of_a_name_counts() {
        let twice = predict_pcr11(&[(Section::Cmdline, b"a"), (Section::Cmdline, b"b")]);
        let last = predict_pcr11(&[(Section::Cmdline, b"b")]);
        assert_eq!(hexes(&twice), hexes(&last));
    }
}
