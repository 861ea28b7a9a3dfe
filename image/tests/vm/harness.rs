//! Building, provisioning and booting the image for the VM test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The build's `SOURCE_DATE_EPOCH` (2025-12-01).
const EPOCH: &str = "1764547200";
/// How long a boot may take to hostd's readiness line under TCG on a loaded 2-core machine.
const BOOT_LIMIT: Duration = Duration::from_secs(360);
/// The VM's network card: its PCI slot on the q35 root bus, and the name systemd gives it
/// from that slot (bus 0, slot 16; `ens16` on qemu's older i440fx machine, whose slots have
/// ACPI slot numbers).
const NIC_SLOT: &str = "0x10";
const UPLINK: &str = "enp0s16";
/// The PCIe root port that a disk plugged in while the machine runs goes behind: q35's root
/// bus, like a server's, takes no hot-plugged cards.
const HOTPLUG_PORT: &str = "late-port";
/// Where the in-country dataset mirror of the node's policy is, as the VM sees it: qemu
/// answers connections there itself (a guest forward) with a line naming the mirror.
pub(crate) const MIRROR: (&str, u16) = ("10.0.2.100", 9000);
pub(crate) const MIRROR_GREETING: &str = "sovereign-dataset-mirror";
/// Where the model hub abroad of the node's policy is, as the VM sees it: qemu runs a program
/// for each connection there that leaves a file ([`Fixture::abroad_marker`]), so a job that
/// reached it would show. Not the host's own address (10.0.2.2): tenants and operators come
/// from there through the host forward, and their downloads are decided by that address.
pub(crate) const ABROAD: (&str, u16) = ("10.0.2.101", 9001);
const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// Tools the test needs, with the Debian package that has each.
const TOOLS: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("swtpm", "swtpm"),
    ("swtpm_setup", "swtpm-tools"),
    ("mkfs.erofs", "erofs-utils"),
    ("veritysetup", "cryptsetup-bin"),
    ("mkfs.fat", "dosfstools"),
    ("mcopy", "mtools"),
    ("zstd", "zstd"),
    ("depmod", "kmod"),
    ("mkfs.ext4", "e2fsprogs"),
    ("gcc", "gcc"),
];

fn check_tools() {
    let missing: Vec<&str> = TOOLS
        .iter()
        .filter(|(tool, _)| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    let ovmf = Path::new(OVMF_CODE).exists();
    assert!(
        missing.is_empty() && ovmf,
        "the image test needs these Debian packages: {} (and ovmf); `.ci/run` installs them",
        missing.join(" ")
    );
}

pub(crate) fn ok(out: Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

fn run(cmd: &mut Command, what: &str) -> String {
    ok(cmd.output().unwrap_or_else(|e| panic!("{what}: {e}")), what)
}

/// What a command that succeeded printed on its standard output alone.
fn stdout_of(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ok(out, what);
    stdout
}

/// Everything built once for the test: the image, the node's material, the swtpm state.
pub(crate) struct Fixture {
    pub(crate) work: PathBuf,
    pub(crate) out: PathBuf,
    pub(crate) esp: PathBuf,
    pub(crate) dev: PathBuf,
    bin: PathBuf,
    provision: PathBuf,
    pub(crate) state: PathBuf,
    tpm: PathBuf,
    pub(crate) port: u16,
}

/// How the image's hostd is compiled: the VM test uses a debug build (CI builds it in about a
/// minute); a node gets the release build, which the boot bench compares it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // `Release` is the boot bench's (image/benches/boot.rs includes this file)
pub(crate) enum HostdBuild {
    Debug,
    Release,
}

impl Fixture {
    /// The VM test's fixture: a debug hostd, in `target/image-vm-test`.
    pub(crate) fn build() -> Fixture {
        Fixture::build_in("image-vm-test", HostdBuild::Debug)
    }

    /// A fixture of its own in `target/<folder>` (emptied first): the image with `hostd`
    /// built as asked, the node's material, a blank state disk and a fresh TPM.
    pub(crate) fn build_in(folder: &str, hostd: HostdBuild) -> Fixture {
        check_tools();
        let image_bin = PathBuf::from(env!("CARGO_BIN_EXE_image"));
        let bin = image_bin.parent().expect("bin dir").to_owned();
        let target = bin.parent().expect("target dir").to_owned();
        let work = target.join(folder);
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("work dir");
        let (hostd, init) = production_binaries(&target, hostd);
        let dev = work.join("dev");
        run(
            Command::new(bin.join("hostd"))
                .args(["dev", "--prepare-only", "--gpus", "H100:1", "--dir"])
                .arg(&dev),
            "hostd dev --prepare-only",
        );
        run(
            Command::new(bin.join("sovctl"))
                .args(["attest", "keygen", "--out"])
                .arg(work.join("release.key")),
            "sovctl attest keygen",
        );
        let out = work.join("out");
        let started = Instant::now();
        let built = run(
            Command::new(&image_bin)
                .env("SOURCE_DATE_EPOCH", EPOCH)
                .arg("build")
                .arg("--out")
                .arg(&out)
                .arg("--hostd")
                .arg(&hostd)
                .arg("--init")
                .arg(&init)
                .arg("--simulated-nvml")
                .arg(sim_library(&bin))
                .arg("--release-key")
                .arg(work.join("release.key"))
                .arg("--cache")
                .arg(target.join("image-debs"))
                .args(debug_cmdline()),
            "image build",
        );
        eprintln!(
            "{} (test: {:.1} s)",
            built.trim(),
            started.elapsed().as_secs_f64()
        );
        let port = free_port();
        let mut fx = Fixture {
            esp: out.join("esp.img"),
            out,
            provision: work.join("provision.img"),
            state: work.join("state.img"),
            tpm: work.join("tpm"),
            dev,
            bin,
            work,
            port,
        };
        fx.provision(&image_bin);
        fx
    }

    /// The node's own material, as an operator would write it, on a provisioning disk; a
    /// blank state disk; a fresh TPM.
    fn provision(&mut self, image_bin: &Path) {
        let node = self.work.join("node");
        std::fs::create_dir_all(node.join("server")).expect("node dir");
        std::fs::create_dir_all(node.join("state")).expect("node dir");
        for f in [
            "ca.pem",
            "policy-authority.key.pub",
            "server/cert.pem",
            "server/key.pem",
            "state/node.key",
        ] {
            std::fs::copy(self.dev.join(f), node.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
        self.node_policy(&node.join("policy.toml"));
        self.enroll(&node.join("enrollment.json"));
        let verifier =
            std::fs::read_to_string(self.dev.join("verifier.key.pub")).expect("verifier key");
        std::fs::write(node.join("hostd.toml"), node_config(verifier.trim())).expect("config");
        run(
            Command::new(image_bin)
                .arg("provision")
                .arg("--from")
                .arg(&node)
                .arg("--out")
                .arg(&self.provision),
            "image provision",
        );
        blank_disk(&self.state);
        for profile in ["operator", "auditor", "hyd-speech"] {
            let path = self.dev.join(profile).join("profile.toml");
            let text = std::fs::read_to_string(&path).expect("profile");
            let text = text.replace(
                "https://127.0.0.1:8443",
                &format!("https://127.0.0.1:{}", self.port),
            );
            std::fs::write(&path, text).expect("profile");
        }
    }

    /// The dev residency policy with its endpoints where the VM sees them: the in-country
    /// dataset mirror is qemu's guest forward ([`MIRROR`]), the model hub abroad another one
    /// ([`ABROAD`]), and the dev user's workstation in India, whose downloads the policy
    /// decides, is the host itself (10.0.2.2, where the host forward's connections come from).
    /// Signed with the dev policy authority.
    fn node_policy(&self, out: &Path) {
        let dev = std::fs::read_to_string(self.dev.join("policy.toml")).expect("dev policy");
        let policy = dev
            .replace("\"10.233.1.0/24\"", &format!("\"{}/32\"", MIRROR.0))
            .replace("\"10.233.2.0/24\"", &format!("\"{}/32\"", ABROAD.0))
            .replace("\"127.0.0.0/8\"", "\"10.0.2.2/32\"");
        assert_ne!(policy, dev, "the dev policy's endpoints moved");
        std::fs::write(out, policy).expect("node policy");
        ok(
            Command::new(self.bin.join("sovctl"))
                .args(["policy", "sign", "--key"])
                .arg(self.dev.join("policy-authority.key"))
                .arg(out)
                .output()
                .expect("sovctl policy sign"),
            "sovctl policy sign",
        );
    }

    /// The operator's enrollment of the node: its identity key and its TPM's attestation key,
    /// read from the TPM before the node's first boot (the AK is derived from the TPM's
    /// endorsement seed, so the node derives the same key when it boots). The AK is bound the
    /// way a sceptical operator binds it: the TPM is manufactured with an EK certificate (a
    /// local CA standing in for its maker), and the enrollment binds the AK only once the TPM
    /// answered a credential challenge under that certified EK (docs/attestation.md §10).
    fn enroll(&self, out: &Path) {
        // A TPM with only the SHA-256 bank active, as the image's measurements use: every
        // extend into four banks costs boot time under emulation.
        let _ = std::fs::remove_dir_all(&self.tpm);
        let maker = tpm::swtpm::LocalCa {
            dir: self.work.join("tpm-maker"),
        };
        tpm::swtpm::manufacture(&self.tpm, &maker).expect("swtpm_setup --create-ek-cert");
        let sw = tpm::swtpm::Swtpm::start(&self.tpm).expect("swtpm for enrollment");
        let socket = sw.socket().display().to_string();
        let identity = self.work.join("tpm-identity.json");
        let id = stdout_of(
            Command::new(self.bin.join("hostd")).args(["tpm-identity", "--swtpm-socket", &socket]),
            "hostd tpm-identity",
        );
        std::fs::write(&identity, id).expect("tpm identity");
        let ca = [
            "--tpm-root".to_string(),
            maker.root_pem().display().to_string(),
            "--tpm-intermediate".to_string(),
            maker.issuer_pem().display().to_string(),
        ];
        let challenge = self.work.join("tpm-challenge.json");
        let secret = self.work.join("tpm-challenge.secret");
        let _ = std::fs::remove_file(&secret);
        run(
            Command::new(self.bin.join("sovctl"))
                .args(["attest", "tpm-challenge", "--identity"])
                .arg(&identity)
                .args(&ca)
                .arg("--out")
                .arg(&challenge)
                .arg("--secret-out")
                .arg(&secret),
            "sovctl attest tpm-challenge",
        );
        let answer = stdout_of(
            Command::new(self.bin.join("hostd"))
                .args(["tpm-activate", "--swtpm-socket", &socket, "--challenge"])
                .arg(&challenge),
            "hostd tpm-activate",
        );
        drop(sw);
        let dev = |f: &str| self.dev.join(f).display().to_string();
        run(
            Command::new(self.bin.join("sovctl"))
                .args([
                    "attest",
                    "enroll",
                    "--authority-key",
                    &dev("enrollment-authority.key"),
                ])
                .args([
                    "--node-key",
                    &dev("state/node.pub"),
                    "--node-name",
                    "vm-node",
                ])
                .args(["--jurisdiction", "IN-TG", "--facility", "hyd-dev-1"])
                .arg("--tpm-identity")
                .arg(&identity)
                .args(&ca)
                .arg("--tpm-secret")
                .arg(&secret)
                .args(["--tpm-answer", answer.trim()])
                .arg("--out")
                .arg(out),
            "sovctl attest enroll --tpm-identity",
        );
        let enrolled = std::fs::read_to_string(out).expect("enrollment");
        assert!(
            enrolled.contains("\"tpm_ek_certificate_sha256\""),
            "the enrollment names the checked EK certificate: {enrolled}"
        );
    }

    /// The file qemu leaves when anything in the VM connects to the model hub abroad.
    pub(crate) fn abroad_marker(&self) -> PathBuf {
        self.work.join("abroad-reached")
    }

    pub(crate) fn sovctl(&self, profile: &str, args: &[&str]) -> Output {
        Command::new(self.bin.join("sovctl"))
            .arg("--profile")
            .arg(self.dev.join(profile))
            .args(args)
            .output()
            .expect("sovctl")
    }

    /// `sovctl attest` against the build's manifest, as a verifier on the host would run it.
    /// The node's evidence is kept as `evidence.json` in the fixture's folder (the last one).
    pub(crate) fn attest(&self, _vm: &Vm) -> String {
        let f = |name: &str| self.dev.join(name).display().to_string();
        let reference = self.out.join("manifest.json").display().to_string();
        let evidence = self.work.join("evidence.json").display().to_string();
        let out = self.sovctl(
            "operator",
            &[
                "attest",
                "--nonce-random",
                "--out",
                &evidence,
                "--reference",
                &reference,
                "--enrollment-authority",
                &f("enrollment-authority.key.pub"),
                "--nvidia-root",
                &f("nvidia-roots.pem"),
                "--rim",
                &f("rims"),
                "--rim-root",
                &f("rim-root.pem"),
                "--require-gpu-reports",
                // The node's AK was enrolled against its TPM's certified EK (Fixture::enroll):
                // a verifier that takes no AK on the operator's word affirms it.
                "--require-tpm-ek",
                "--min-gpus",
                "1",
            ],
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// A lease of one H100 for `hyd-speech` (internal data: its jobs may reach only endpoints
    /// in India), the tenant created first if this node has not seen it; returns its id.
    pub(crate) fn lease(&self) -> String {
        let _ = self.sovctl(
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
        );
        let lease = ok(
            self.sovctl(
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
                    "internal",
                ],
            ),
            "lease create",
        );
        serde_json_id(&lease)
    }

    /// Bills something (so the ledger is not empty), exports the ledger as an auditor and
    /// verifies the export offline against the first export's key; returns its record count.
    pub(crate) fn export_ledger(&self, _vm: &Vm, name: &str) -> usize {
        let id = self.lease();
        ok(
            self.sovctl("hyd-speech", &["lease", "end", &id]),
            "lease end",
        );
        let dir = self.work.join(name);
        ok(
            self.sovctl(
                "auditor",
                &["audit", "export", "--out", dir.to_str().expect("utf-8")],
            ),
            "audit export",
        );
        let first = self.work.join("export-1");
        let mut args = vec![
            "audit".to_owned(),
            "verify".to_owned(),
            dir.display().to_string(),
            "--quiet".to_owned(),
            "--vkey".to_owned(),
            first.join("log.vkey").display().to_string(),
        ];
        if dir != first {
            args.push("--previous".into());
            args.push(first.join("checkpoint").display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(self.sovctl("auditor", &args), "audit verify");
        std::fs::read_to_string(dir.join("records.jsonl"))
            .expect("records")
            .lines()
            .count()
    }

    /// The ESP of a UKI whose command line differs from the built one in one byte: `quiet`
    /// made `quieT`, as someone who wanted a talkative boot might. The initrd then prints
    /// what it does, which the test reads to know when the initrd is done.
    pub(crate) fn tampered_esp(&self) -> PathBuf {
        let mut uki = std::fs::read(self.out.join("uki.efi")).expect("uki");
        let needle = b" quiet loglevel=";
        let at = uki
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("quiet in the UKI's command line");
        uki[at + " quie".len()] = b'T';
        let path = self.work.join("tampered.efi");
        std::fs::write(&path, &uki).expect("tampered uki");
        let esp = self.work.join("tampered-esp.img");
        image::build::write_esp(&path, &esp, EPOCH.parse().expect("epoch")).expect("esp");
        esp
    }
}

fn serde_json_id(text: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!("lease create --json answered {text:?}: {e}");
    });
    v["id"].as_str().expect("lease id").to_owned()
}

/// The node's hostd.toml, as its operator writes it.
fn node_config(verifier: &str) -> String {
    format!(
        r#"[node]
name = "vm-node"
jurisdiction = "IN-TG"
facility = "hyd-dev-1"

[api]
listen = "0.0.0.0:7443"
trust_domain = "sovereign.local"
ca = "ca.pem"
cert = "server/cert.pem"
key = "server/key.pem"

[state]
dir = "state"

[gpu]
nvml_library = "/usr/lib/sovereign-host/libnvidia_ml_sim.so"

[rates]
H100 = "250.00"

[policy]
file = "policy.toml"
authority = "policy-authority.key.pub"

[attestation]
enrollment_certificate = "enrollment.json"
verifier_keys = ["{verifier}"]

[workloads]
# On the state disk: ext4 with the encrypt feature, for leases' fscrypt scratch.
work_dir = "/var/lib/hostd/work"
uplinks = ["{UPLINK}"]
"#
    )
}

/// With `SOVEREIGN_VM_DEBUG=1`, the whole journal goes to the console (slower boots; for
/// finding out why a boot stalls, since the image has no shell to look with), and so do the
/// kernel's messages and systemd's from before journald runs (through the
/// kernel's log, unthrottled), so that [`print_blame`] sees the earliest units start too.
fn debug_cmdline() -> Vec<String> {
    match std::env::var("SOVEREIGN_VM_DEBUG").as_deref() {
        Ok("1") => vec![
            "--extra-cmdline".into(),
            "systemd.journald.forward_to_console=1 systemd.journald.max_level_console=info \
             loglevel=7 printk.devkmsg=on systemd.log_level=info"
                .into(),
        ],
        _ => Vec::new(),
    }
}

/// `cargo build --no-default-features` of hostd (the production build, without simulation)
/// and the initrd's `sovereign-init`, in a target folder of their own (the outer
/// `cargo test` holds the workspace's).
fn production_binaries(target: &Path, build: HostdBuild) -> (PathBuf, PathBuf) {
    let dir = target.join("image-hostd");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (profile_flag, profile_dir): (&[&str], _) = match build {
        HostdBuild::Debug => (&[], "debug"),
        HostdBuild::Release => (&["--release"], "release"),
    };
    let started = Instant::now();
    run(
        Command::new(cargo)
            .arg("build")
            .args(profile_flag)
            .args([
                "-q",
                "-p",
                "hostd",
                "-p",
                "sovereign-init",
                "--no-default-features",
                "--bin",
                "hostd",
                "--bin",
                "sovereign-init",
                "--target-dir",
            ])
            .arg(&dir)
            .current_dir(env!("CARGO_MANIFEST_DIR")),
        "building the production hostd and sovereign-init",
    );
    eprintln!(
        "production hostd and sovereign-init built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let out = dir.join(profile_dir);
    (out.join("hostd"), out.join("sovereign-init"))
}

/// A blank 512 MiB disk (sparse).
pub(crate) fn blank_disk(path: &Path) {
    let disk = std::fs::File::create(path).expect("blank disk");
    disk.set_len(512 << 20).expect("blank disk size");
}

/// fake-nvml's library: next to the binaries, or in `deps/` where a clean `cargo test` leaves
/// it (as hostd's own lookup does).
fn sim_library(bin: &Path) -> PathBuf {
    let name = "libnvidia_ml_sim.so";
    [bin.join(name), bin.join("deps").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found in {} or its deps/", bin.display()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running VM (and its swtpm); killed when dropped.
pub(crate) struct Vm {
    qemu: Child,
    swtpm: Child,
    console: PathBuf,
    /// qemu's own complaints (a refused option, a missing file), shown with the console.
    qemu_log: PathBuf,
    /// From qemu's start to hostd's readiness line (zero until [`Vm::boot`] has seen it).
    ready_after: Duration,
    /// qemu's human monitor: how the test presses the machine's power button.
    monitor: PathBuf,
}

impl Vm {
    /// Boots `esp` with the fixture's disks, `state` as the state disk and the fixture's TPM,
    /// and waits for hostd's readiness line.
    pub(crate) fn boot(fx: &Fixture, esp: &Path, state: &Path, label: &str) -> Vm {
        Vm::boot_with(fx, esp, state, label, Provisioning::Attached)
    }

    /// [`Vm::boot`], with the provisioning disk attached as `provisioning` says.
    pub(crate) fn boot_with(
        fx: &Fixture,
        esp: &Path,
        state: &Path,
        label: &str,
        provisioning: Provisioning,
    ) -> Vm {
        let started = Instant::now();
        let mut vm = Vm::start(fx, esp, state, label, provisioning);
        if provisioning == Provisioning::AfterTheInitrd {
            vm.attach_provisioning_disk_after_the_initrd(fx, label);
        }
        vm.wait_for_console("hostd ready", "hostd's readiness line", label);
        vm.ready_after = started.elapsed();
        eprintln!(
            "{label}: hostd ready {:.1} s after qemu started",
            vm.ready_after.as_secs_f64()
        );
        print_blame(label, &vm.console_text());
        vm
    }

    /// How long the boot took to hostd's readiness line (read every 250 ms).
    #[allow(dead_code)] // the boot bench's (image/benches/boot.rs includes this file)
    pub(crate) fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// Boots a machine that must not get as far as hostd (its sealed state stays closed):
    /// waits until it powers off by itself (the image's answer to a failed boot) or `window`
    /// passes, whichever is first, then stops it; returns the console and whether the machine
    /// had powered itself off.
    pub(crate) fn boot_refused(
        fx: &Fixture,
        esp: &Path,
        state: &Path,
        label: &str,
        window: Duration,
    ) -> (String, bool) {
        let mut vm = Vm::start(fx, esp, state, label, Provisioning::Attached);
        let deadline = Instant::now() + window;
        while Instant::now() < deadline && !vm.has_exited() {
            std::thread::sleep(Duration::from_millis(250));
        }
        let powered_off = vm.has_exited();
        let console = vm.console_text();
        vm.power_cut();
        (console, powered_off)
    }

    fn start(
        fx: &Fixture,
        esp: &Path,
        state: &Path,
        label: &str,
        provisioning: Provisioning,
    ) -> Vm {
        // File names from the label, safe inside qemu's and swtpm's comma-separated options.
        let tag: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let sock = fx.work.join(format!("swtpm-{tag}.sock"));
        let swtpm = Command::new("swtpm")
            .args(["socket", "--tpm2", "--flags", "startup-clear", "--tpmstate"])
            .arg(format!("dir={}", fx.tpm.display()))
            .arg("--ctrl")
            .arg(format!("type=unixio,path={}", sock.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("swtpm");
        wait_for(|| sock.exists(), Duration::from_secs(10), "swtpm socket");
        // The machine's firmware variables (NVRAM) outlive a boot, as a server's do: made
        // once per fixture (one machine, one TPM). A fresh copy at every boot cost each boot
        // about 2.3 s of firmware time under TCG (three interleaved pairs, 2026-12-06), time no
        // real node's reboot spends.
        let vars = fx.work.join("nvram.fd");
        if !vars.exists() {
            std::fs::copy(OVMF_VARS, &vars).expect("OVMF vars");
        }
        let console = fx.work.join(format!("console-{tag}.log"));
        let qemu_log = fx.work.join(format!("qemu-{tag}.log"));
        let qemu_stderr = std::fs::File::create(&qemu_log).expect("qemu's log");
        let monitor = fx.work.join(format!("monitor-{tag}.sock"));
        let _ = std::fs::remove_file(&monitor);
        // -nodefaults: no VGA, CD-ROM or floppy for the firmware to probe, as on a server.
        let qemu = Command::new("qemu-system-x86_64")
            .args([
                "-accel",
                "tcg",
                "-smp",
                "1",
                "-m",
                "1024",
                // A server's CPU has a hardware random generator (RDRAND), which the kernel
                // seeds its own from at boot. Without it, the first reader of random numbers
                // waits while the kernel gathers timing jitter: a second of busy CPU under
                // emulation, in the middle of the boot.
                "-cpu",
                "qemu64,+rdrand",
                "-no-reboot",
                "-nodefaults",
                // A PCIe machine (q35), as servers are. On qemu's default i440fx the kernel
                // spent 1.5 s more before the initrd saw its first disk (the PIIX4's PCI
                // interrupt links, set up through ACPI one by one), but q35's AHCI controller
                // gives udev's coldplug more devices: whole boots took as long on both
                // (interleaved pairs, 2026-12-07; docs/image.md, Figures).
                "-machine",
                "q35",
            ])
            .args([
                "-drive",
                &format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"),
            ])
            .args([
                "-drive",
                &format!("if=pflash,format=raw,file={}", vars.display()),
            ])
            .args([
                "-chardev",
                &format!("socket,id=chrtpm,path={}", sock.display()),
            ])
            .args([
                "-tpmdev",
                "emulator,id=tpm0,chardev=chrtpm",
                "-device",
                "tpm-crb,tpmdev=tpm0",
            ])
            .args(disk("esp", esp, true, None))
            .args(disk("root", &fx.out.join("root.erofs"), true, None))
            .args(disk("verity", &fx.out.join("root.verity"), true, None))
            .args(disk("state", state, false, Some("sovereign-state")))
            .args(match provisioning {
                Provisioning::Attached => disk("prov", &fx.provision, true, None),
                Provisioning::AfterTheInitrd => vec![
                    "-device".into(),
                    format!("pcie-root-port,id={HOTPLUG_PORT},chassis=1"),
                ],
            })
            .args([
                "-netdev",
                &format!(
                    "user,id=n0,hostfwd=tcp:127.0.0.1:{}-:7443,\
                     guestfwd=tcp:{}:{}-cmd:echo {MIRROR_GREETING},\
                     guestfwd=tcp:{}:{}-cmd:touch {}",
                    fx.port,
                    MIRROR.0,
                    MIRROR.1,
                    ABROAD.0,
                    ABROAD.1,
                    fx.abroad_marker().display()
                ),
            ])
            .args([
                "-device",
                // No option ROM: the node boots from its disk, never over the network (as a
                // server with PXE off in its setup), and the firmware skips loading iPXE.
                &format!("virtio-net-pci,netdev=n0,addr={NIC_SLOT},romfile="),
            ])
            .args(["-serial", &format!("file:{}", console.display())])
            .args([
                "-monitor",
                &format!("unix:{},server=on,wait=off", monitor.display()),
            ])
            .arg("-display")
            .arg("none")
            .stdout(Stdio::null())
            .stderr(qemu_stderr)
            .spawn()
            .expect("qemu");
        Vm {
            qemu,
            swtpm,
            console,
            qemu_log,
            ready_after: Duration::ZERO,
            monitor,
        }
    }

    /// Waits for the initrd to say it found no provisioning disk (which it says only when
    /// the command line lacks `quiet`), then plugs the disk in, as virtual media that an
    /// operator's BMC attaches late: `sovereign-provision.service` in the root must find it.
    fn attach_provisioning_disk_after_the_initrd(&mut self, fx: &Fixture, label: &str) {
        // What the initrd prints when it leaves the copy to the root.
        let no_disk = sovereign_init::provision::Provisioned::NoDisk.to_string();
        self.wait_for_console(&no_disk, "the initrd's word that it saw no disk", label);
        self.monitor_command(&format!(
            "drive_add 0 if=none,id=prov,format=raw,readonly=on,file={}",
            fx.provision.display()
        ));
        self.monitor_command(&format!(
            "device_add virtio-blk-pci,drive=prov,id=prov-disk,bus={HOTPLUG_PORT}"
        ));
        eprintln!("{label}: provisioning disk plugged in after the initrd");
    }

    /// Waits up to [`BOOT_LIMIT`] for `text` on the console (read every 250 ms); fails the
    /// test, with the console's tail, if the machine powers off first or the time runs out.
    fn wait_for_console(&mut self, text: &str, what: &str, label: &str) {
        let deadline = Instant::now() + BOOT_LIMIT;
        while !self.console_text().contains(text) {
            if self.has_exited() {
                panic!(
                    "the VM powered off before {what} ({label}):\n{}",
                    self.console_tail()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "no {what} after {} s ({label}):\n{}",
                    BOOT_LIMIT.as_secs(),
                    self.console_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Sends one command to qemu's human monitor and waits for its answer (up to the next
    /// prompt). A command qemu refuses fails the test with qemu's words.
    fn monitor_command(&self, command: &str) {
        use std::io::Write;
        let mut monitor = std::os::unix::net::UnixStream::connect(&self.monitor)
            .unwrap_or_else(|e| panic!("qemu monitor {}: {e}", self.monitor.display()));
        monitor
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("monitor timeout");
        let mut seen = Vec::new();
        read_to_prompt(&mut monitor, &mut seen, 1); // the greeting
        monitor
            .write_all(format!("{command}\n").as_bytes())
            .expect("monitor write");
        read_to_prompt(&mut monitor, &mut seen, 2);
        let answer = String::from_utf8_lossy(&seen);
        for refusal in ["Error", "error", "Could not", "not found"] {
            assert!(
                !answer.contains(refusal),
                "qemu refused {command:?}:\n{answer}"
            );
        }
    }

    /// Presses the power button (an ACPI event, as a BMC or an operator's finger sends) and
    /// waits up to `limit` for the node to shut down by itself; false if it is still running.
    /// The press is repeated every 15 s, as an operator would: logind, which acts on it,
    /// starts only once hostd is ready, and a press before that goes unheard.
    pub(crate) fn press_power_button(&mut self, limit: Duration) -> bool {
        use std::io::Write;
        let mut monitor = std::os::unix::net::UnixStream::connect(&self.monitor)
            .unwrap_or_else(|e| panic!("qemu monitor {}: {e}", self.monitor.display()));
        let deadline = Instant::now() + limit;
        let mut next_press = Instant::now();
        while Instant::now() < deadline {
            if self.has_exited() {
                return true;
            }
            if Instant::now() >= next_press {
                // The monitor closes with qemu: a failed write means it is going down.
                let _ = monitor.write_all(b"system_powerdown\n");
                next_press = Instant::now() + Duration::from_secs(15);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        false
    }

    /// Whether qemu has exited (the machine powered off, or qemu failed).
    fn has_exited(&mut self) -> bool {
        matches!(self.qemu.try_wait(), Ok(Some(_)))
    }

    pub(crate) fn console_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()).into_owned()
    }

    pub(crate) fn console_tail(&self) -> String {
        let text = self.console_text();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        match std::fs::read_to_string(&self.qemu_log) {
            Ok(qemu) if !qemu.trim().is_empty() => format!("{tail}\n--- qemu ---\n{qemu}"),
            _ => tail,
        }
    }

    /// Cuts the power: qemu stops at once, as a node does when its PSU fails. The state disk
    /// (ext4, sled's fsyncs, the ledger's write-ahead intents) must survive it.
    pub(crate) fn power_cut(&mut self) {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        let _ = self.swtpm.kill();
        let _ = self.swtpm.wait();
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.power_cut();
    }
}

/// Reads qemu's monitor until `seen` holds `prompts` prompts in all.
fn read_to_prompt(
    monitor: &mut std::os::unix::net::UnixStream,
    seen: &mut Vec<u8>,
    prompts: usize,
) {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    while String::from_utf8_lossy(seen).matches("(qemu)").count() < prompts {
        let n = monitor.read(&mut chunk).expect("qemu monitor's answer");
        assert!(n > 0, "qemu's monitor closed before it answered");
        seen.extend_from_slice(&chunk[..n]);
    }
}

/// What `systemd-analyze blame` would say of a boot whose journal went to the console
/// (`SOVEREIGN_VM_DEBUG=1`): the ten slowest units to activate, and where systemd's first line
/// came, up to which the time is the kernel's and the initrd's. Prints nothing otherwise.
fn print_blame(label: &str, console: &str) {
    let Some(userspace) = crate::blame::first_manager_line(console) else {
        return;
    };
    eprintln!("{label}: systemd's first console line at {userspace:.2} s (kernel clock); blame:");
    for a in crate::blame::blame(console).iter().take(10) {
        eprintln!(
            "  {:6.3} s  {} (from {:.2} s)",
            a.seconds, a.unit, a.started_at
        );
    }
}

/// Whether the provisioning disk is there from power-on (the usual first boot, copied by the
/// initrd) or plugged in only once the initrd has passed (copied by the root's unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provisioning {
    Attached,
    AfterTheInitrd,
}

fn disk(id: &str, file: &Path, readonly: bool, serial: Option<&str>) -> Vec<String> {
    let ro = if readonly { ",readonly=on" } else { "" };
    let serial = serial.map(|s| format!(",serial={s}")).unwrap_or_default();
    vec![
        "-drive".into(),
        format!("if=none,id={id},format=raw{ro},file={}", file.display()),
        "-device".into(),
        format!("virtio-blk-pci,drive={id}{serial}"),
    ]
}

fn wait_for(mut done: impl FnMut() -> bool, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("timed out after {} s waiting for {what}", limit.as_secs());
}
