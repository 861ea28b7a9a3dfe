//! `hostd dev`: a complete node on one machine with nothing installed.
//!
//! Creates (once) a state folder with a dev CA, certificates and `sovctl` profiles for an
//! operator, an auditor and two tenants, a config with simulated GPUs served by the fake NVML
//! library, and a residency policy; then runs the ordinary daemon on it. Nothing here is used
//! by `hostd run`: simulation is only ever switched on by this command.

use crate::clock::Clock;
use crate::config::Config;
use crate::gpu;
use crate::pki::DevPki;
use crate::principal::Role;
use crate::workload::container::PrivateSystemd;
use anyhow::{bail, Context, Result};
use attest::report::report;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Options of `hostd dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Folder for the dev PKI, config, policy and state.
    #[arg(long, default_value = "dev-state")]
    pub dir: PathBuf,
    /// API address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Simulated GPUs, `MODEL:COUNT,...`.
    #[arg(long, default_value = "H100:4,L4:4")]
    pub gpus: String,
    /// Clock seconds per real second (3600: an hour a second), so long leases bill quickly.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Seconds of clock time between metering samples.
    #[arg(long, default_value_t = 10.0)]
    pub interval: f64,
    /// Real seconds of uninterrupted metering failure after which hostd stops (so that a
    /// supervisor restarts it).
    #[arg(long, default_value_t = 120)]
    pub stop_after_failing_secs: u64,
    /// Fake NVML library to load (default: the one built next to this binary).
    #[arg(long)]
    pub nvml_library: Option<PathBuf>,
    /// Confidential-computing mode of the simulated GPUs: off, on or devtools (on needs a
    /// fleet of CC-capable GPUs, e.g. `--gpus H100:4`). With CC on they sign attestation
    /// reports chaining to the roots in `nvidia-roots.pem`.
    #[arg(long, default_value = "off", value_parser = ["off", "on", "devtools"])]
    pub cc: String,
    /// Write the dev folder (PKI, config, signed policy, keys, enrollment) and exit without
    /// starting the node: the material a provisioning disk for a test image is made from.
    #[arg(long)]
    pub prepare_only: bool,
}

/// The dev principals: (role, name); a profile folder per name.
pub const DEV_PRINCIPALS: [(Role, &str); 4] = [
    (Role::Operator, "operator"),
    (Role::Auditor, "auditor"),
    (Role::Tenant, "hyd-speech"),
    (Role::Tenant, "eu-bio"),
];

/// The dev residency policy (after the seed scenario of docs/policy.md).
pub(crate) const DEV_POLICY: &str = include_str!("dev-policy.toml");

fn write_if_missing(path: &Path, text: &str) -> Result<()> {
    if !path.exists() {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The lock file that marks a dev folder in use; held (advisory `flock`) for the life of the
/// process, and released by the kernel however the process ends.
pub const DEV_LOCK_FILE: &str = "hostd-dev.lock";

fn lock_dev_dir(dir: &Path) -> Result<()> {
    use std::io::Write;
    static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    let path = dir.join(DEV_LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "{} is in use by another `hostd dev` (it holds {}); stop it first or pass another --dir",
            dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    // For people looking at the folder: who holds it.
    let _ = file.set_len(0);
    let _ = writeln!(file, "{}", std::process::id());
    let _ = HELD.set(file);
    Ok(())
}

/// Prepares the dev folder and the simulation environment; returns the config to run.
///
/// Must run before any thread is started: it sets the fake NVML library's environment.
pub fn prepare(args: &DevArgs) -> Result<Config> {
    let dir = claim_dev_dir(&args.dir)?;
    DevPki::create(
        &dir,
        "sovereign.local",
        &["localhost", "127.0.0.1"],
        &DEV_PRINCIPALS,
        &server_url(args.listen),
    )
    .context("creating the dev PKI")?;
    let lib = match &args.nvml_library {
        Some(p) => p.clone(),
        None => gpu::sim_library_path().context(
            "the fake NVML library (libnvidia_ml_sim.so) was not found next to hostd; build the workspace (`cargo build --release`) or pass --nvml-library",
        )?,
    };
    write_if_missing(&dir.join("policy.toml"), DEV_POLICY)?;
    sign_dev_policy(&dir)?;
    let verifier_pub = dev_key(&dir, "verifier.key")?;
    let lib = lib.to_str().with_context(|| {
        format!(
            "the NVML library's path {} is not UTF-8, which hostd.toml cannot hold",
            lib.display()
        )
    })?;
    let config_path = dir.join("hostd.toml");
    let text = dev_config(args, lib, &verifier_pub);
    // Checked before it is written, so that flags out of range (`--time-scale 0`) leave the
    // folder's config as it was; what is written is what was checked, so it is not read back.
    let mut cfg = Config::from_toml(&text, &config_path)
        .context("the flags of `hostd dev` (--time-scale, --interval, --listen) are not valid")?;
    std::fs::write(&config_path, text)
        .with_context(|| format!("writing {}", config_path.display()))?;
    cfg.source = Some(config_path);
    simulation_env(&dir, args)?;
    prepare_attestation(&dir, &cfg)?;
    Ok(cfg)
}

/// Creates and locks the dev folder; returns its canonical path.
fn claim_dev_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    // Before anything in the folder is written: a second `hostd dev` on a folder in use must
    // change nothing (not its config, keys or profiles) before it is refused.
    lock_dev_dir(&dir)?;
    Ok(dir)
}

/// The URL the profiles name. It must be an address in the server certificate: a wildcard
/// listen address is reached on loopback.
fn server_url(listen: SocketAddr) -> String {
    let mut connect = listen;
    if connect.ip().is_unspecified() {
        connect.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("https://{connect}")
}

/// A TOML basic string holding `s`, escaped (a library path may hold quotes or backslashes).
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The dev node's hostd.toml: the simulated GPUs' library `lib`, the dev verifier's key.
fn dev_config(args: &DevArgs, lib: &str, verifier_pub: &str) -> String {
    format!(
        r#"# hostd dev-mode configuration (generated by `hostd dev`; edit freely).
[node]
name = "dev-node"
jurisdiction = "IN-TG"
facility = "hyd-dev-1"

[api]
listen = {listen}
trust_domain = "sovereign.local"
ca = "ca.pem"
cert = "server/cert.pem"
key = "server/key.pem"

[state]
dir = "state"

[gpu]
nvml_library = {lib}

[metering]
interval_secs = {interval}
time_scale = {scale}
stop_after_failing_secs = {stop_after}

[rates]
H100 = "250.00"
L4 = "60.00"

[policy]
file = "policy.toml"
authority = "policy-authority.key.pub"

[attestation]
enrollment_certificate = "enrollment.json"
verifier_keys = [{verifier}]
# The dev enrollment binds no TPM attestation key, so a dev machine's own TPM stays out of it.
tpm = "off"

[workloads]
work_dir = "work"
# A loop-mounted ext4 with the encrypt feature, made by `hostd dev` (fscrypt needs one).
scratch_dir = "work/scratch-volume/mnt"
scratch_quota_bytes = 2147483648
# Published service ports of jobs: on loopback only, on a dev machine.
publish_address = "127.0.0.1"
"#,
        verifier = toml_string(verifier_pub),
        listen = toml_string(&args.listen.to_string()),
        lib = toml_string(lib),
        interval = toml::Value::Float(args.interval),
        scale = toml::Value::Float(args.time_scale),
        stop_after = args.stop_after_failing_secs,
    )
}

/// The simulation reads these at nvmlInit; the process is still single-threaded here.
fn simulation_env(dir: &Path, args: &DevArgs) -> Result<()> {
    std::env::set_var("NVML_SIM_GPUS", &args.gpus);
    // Load and faults can be injected by editing this file while the node runs.
    let control = dir.join("gpu-control.json");
    write_if_missing(&control, "{\"load\": {}, \"faults\": {}}\n")?;
    std::env::set_var("NVML_SIM_CONTROL", &control);
    std::env::set_var("NVML_SIM_CC", &args.cc);
    Ok(())
}

/// Hex public key of the dev key `name` in `dir` (created on first use, with `name.pub`).
fn dev_key(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    let key = if path.exists() {
        keyfile::read_ed25519(&path)?
    } else {
        keyfile::create_ed25519(&path)?
    };
    Ok(hex::encode(key.verifying_key().to_bytes()))
}

/// Attestation material of the dev node, in the dev folder:
///
/// * `enrollment-authority.key(.pub)` and `enrollment.json`, the node's enrollment
///   certificate (re-issued at every start, for the key in `state/node.key`);
/// * `verifier.key(.pub)`: a verifier key whose results the node accepts;
/// * `release.key(.pub)` and `reference.json`: a signed image manifest with this `hostd`
///   binary and `hostd.toml` as reference measurements;
/// * `nvidia-roots.pem`, `rims/` and `rim-root.pem`: what a verifier must trust to accept the
///   simulated GPUs (their device roots, their signed RIMs, and the RIM publisher's root).
///
/// With these, `sovctl attest` against the dev node appraises as it would a real one.
fn prepare_attestation(dir: &Path, cfg: &Config) -> Result<()> {
    dev_enrollment(dir, cfg)?;
    dev_reference_manifest(dir)?;
    simulated_gpu_references(dir)
}

/// Enrolls the node's key (created on first use) under the dev enrollment authority, for a
/// year, with no TPM.
fn dev_enrollment(dir: &Path, cfg: &Config) -> Result<()> {
    use attest::identity::{EnrollmentAuthority, EnrollmentClaims};
    crate::daemon::ensure_state_dir(&cfg.state.dir)?;
    let node_key = crate::attestation::load_or_create_node_key(&cfg.state.dir)?;
    dev_key(dir, "enrollment-authority.key")?;
    let authority_key = keyfile::read_ed25519(&dir.join("enrollment-authority.key"))?;
    let authority = EnrollmentAuthority::from_seed(authority_key.as_bytes());
    let now = crate::attestation::unix_now();
    let cert = authority
        .issue(EnrollmentClaims {
            tpm_ak: None,
            tpm_ek_certificate_sha256: None,
            node_public_key: node_key.public_key(),
            node_name: cfg.node.name.clone(),
            jurisdiction: cfg.node.jurisdiction.clone(),
            facility: cfg.node.facility.clone(),
            not_before: now.saturating_sub(3600),
            not_after: now + 365 * 86_400,
            authority_public_key: [0; 32],
        })
        .context("issuing the dev enrollment certificate")?;
    std::fs::write(
        dir.join("enrollment.json"),
        cert.to_bytes()
            .context("encoding the dev enrollment certificate")?,
    )
    .context("writing enrollment.json")
}

/// The reference manifest a dev node is appraised against: this hostd binary and the config
/// just written, signed by the dev release key.
fn dev_reference_manifest(dir: &Path) -> Result<()> {
    dev_key(dir, "release.key")?;
    let release = keyfile::read_ed25519(&dir.join("release.key"))?;
    let exe = std::env::current_exe().context("locating the hostd binary")?;
    let mut measurements = std::collections::BTreeMap::new();
    for (name, path) in [
        ("hostd", exe.as_path()),
        ("hostd.config", &dir.join("hostd.toml")),
    ] {
        let d = crate::attestation::file_digest(path)
            .with_context(|| format!("measuring {}", path.display()))?;
        measurements.insert(name.to_string(), d);
    }
    let manifest = attest::manifest::ImageManifest {
        name: "hostd-dev".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        measurements,
        components: Default::default(),
    }
    .sign(&release)
    .context("signing the dev reference manifest")?;
    std::fs::write(
        dir.join("reference.json"),
        manifest
            .to_bytes()
            .context("encoding the dev reference manifest")?,
    )
    .context("writing reference.json")
}

/// The simulated GPUs' certificate roots, their RIM publisher's root, and their signed RIMs
/// (rims/ rewritten, so that a changed `--gpus` leaves no stale RIM).
fn simulated_gpu_references(dir: &Path) -> Result<()> {
    let sim = nvidia_ml_sim::config::SimConfig::from_env()
        .map_err(|e| anyhow::anyhow!("simulated GPUs: {e}", e = report(&e)))?;
    let roots = nvidia_ml_sim::attestation::root_bundle_pem(&sim)
        .map_err(|e| anyhow::anyhow!("simulated GPU roots: {e}", e = report(&e)))?;
    std::fs::write(dir.join("nvidia-roots.pem"), roots).context("writing nvidia-roots.pem")?;
    let rims = dir.join("rims");
    if rims.exists() {
        std::fs::remove_dir_all(&rims).context("clearing rims/")?;
    }
    std::fs::create_dir_all(&rims).context("creating rims/")?;
    let rim_root = nvidia_ml_sim::attestation::rim_root_pem(&sim)
        .map_err(|e| anyhow::anyhow!("simulated RIM publisher: {e}", e = report(&e)))?;
    std::fs::write(dir.join("rim-root.pem"), rim_root).context("writing rim-root.pem")?;
    let signed_rims = nvidia_ml_sim::attestation::rims(&sim)
        .map_err(|e| anyhow::anyhow!("signing the simulated GPUs' RIMs: {e}", e = report(&e)))?;
    for (name, xml) in signed_rims {
        std::fs::write(rims.join(&name), xml).with_context(|| format!("writing rims/{name}"))?;
    }
    Ok(())
}

/// Signs `policy.toml` with the dev policy authority (created on first use), so that the dev
/// node runs the same signed-policy path as production. An edited policy is re-signed; the
/// node still refuses it if its version was not raised (rollback protection).
pub(crate) fn sign_dev_policy(dir: &Path) -> Result<()> {
    use rand_core::{OsRng, RngCore};
    let key_path = dir.join("policy-authority.key");
    let key = if key_path.exists() {
        let text = keyfile::read_private(&key_path)
            .with_context(|| format!("reading {}", key_path.display()))?;
        policy::SignerKey::parse(text.trim())
            .with_context(|| format!("parsing {}", key_path.display()))?
    } else {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        OsRng
            .try_fill_bytes(seed.as_mut())
            .context("generating the dev policy authority key")?;
        let key = policy::SignerKey::from_seed("dev-policy-authority", &seed)
            .context("creating the dev policy authority key")?;
        crate::keys::write_new_private(&key_path, key.encode().as_bytes())
            .with_context(|| format!("writing {}", key_path.display()))?;
        key
    };
    std::fs::write(
        keyfile::public_key_path(&key_path),
        format!("{}\n", key.verifier().encode()),
    )
    .context("writing the policy authority's verifier key")?;
    let policy_path = dir.join("policy.toml");
    let bytes = std::fs::read(&policy_path)
        .with_context(|| format!("reading {}", policy_path.display()))?;
    let sig = policy::sign_bundle(&bytes, &key)
        .with_context(|| format!("signing {}", policy_path.display()))?;
    std::fs::write(crate::residency::signature_path(&policy_path), sig)
        .context("writing the policy signature")?;
    Ok(())
}

/// Boots (or adopts) the private systemd that runs dev mode's jobs, and gives the simulated
/// GPUs device nodes in it. Where that cannot be had, jobs are off and the reason says what to
/// install; the rest of the node runs.
pub fn workloads(
    dir: &Path,
    cfg: &Config,
    gpus: &str,
) -> (crate::daemon::WorkloadSetup, Option<PrivateSystemd>) {
    use crate::daemon::JobsOff;
    let off = |why: JobsOff| {
        (
            crate::daemon::WorkloadSetup {
                bus: Err(why),
                system_root: PathBuf::from("/"),
                sim_control: None,
            },
            None,
        )
    };
    if let Err(why) = crate::workload::runner::check_work_dir(&cfg.workloads.work_dir) {
        return off(why.into());
    }
    if let Err(source) = std::fs::create_dir_all(&cfg.workloads.work_dir) {
        return off(JobsOff::WorkDir {
            dir: cfg.workloads.work_dir.clone(),
            source,
        });
    }
    let dev =
        |what, source: Box<dyn std::error::Error + Send + Sync>| JobsOff::Dev { what, source };
    let dir = &dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    if let Err(e) = scratch_volume(&cfg.workloads.work_dir) {
        return off(dev("no encrypted scratch volume", e.into()));
    }
    if let Err(e) = shared_netns_dir() {
        return off(dev(
            "cannot prepare /run/netns for lease networks",
            e.into(),
        ));
    }
    let machine = format!("sovereign-dev-{}", short_hash(dir));
    let binds = [cfg.workloads.work_dir.clone(), PathBuf::from(NETNS_DIR)];
    let container = match PrivateSystemd::start_or_adopt(dir, &machine, &binds) {
        Ok(c) => c,
        Err(e) => return off(dev("no private systemd for jobs", e.into())),
    };
    if let Err(e) = make_gpu_nodes(&container.root(), sim_gpu_count(gpus))
        .and_then(|()| resolve_users_from_userdb(&container.root()))
    {
        container.shutdown(std::time::Duration::from_secs(5));
        return off(dev(
            "cannot create the simulated GPUs' device nodes",
            e.into(),
        ));
    }
    (
        crate::daemon::WorkloadSetup {
            bus: Ok(container.bus_address()),
            system_root: container.root(),
            sim_control: Some(dir.join("gpu-control.json")),
        },
        Some(container),
    )
}

/// A clean stop of `hostd dev`: the private systemd (and every job in it) shuts down, then
/// the scratch volume is unmounted (its loop device released).
pub fn stop_workloads(container: PrivateSystemd, cfg: &Config) {
    container.shutdown(std::time::Duration::from_secs(10));
    let mnt = cfg.workloads.work_dir.join("scratch-volume/mnt");
    let _ = std::process::Command::new("umount")
        .arg("-d")
        .arg(&mnt)
        .status();
    remove_idle_lease_table();
}

/// hostd's nftables table, when no lease network is left in it: a dev machine is left as it
/// was found. (A node keeps it: lease networks outlive hostd.)
fn remove_idle_lease_table() {
    use crate::workload::egress::TABLE;
    let Ok(out) = std::process::Command::new("nft")
        .args(["list", "table", "inet", TABLE])
        .output()
    else {
        return;
    };
    if out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("lease_out_") {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", TABLE])
            .output();
    }
}

/// Where `ip netns` keeps lease namespaces.
const NETNS_DIR: &str = "/run/netns";

/// The scratch volume (a sparse 4 GiB ext4 image with the encrypt feature), mounted before
/// the container boots so that the container sees it through its bind of the work folder.
fn scratch_volume(work: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = work.join("scratch-volume");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let v = crate::workload::scratch::volume::DevVolume::mount(&dir, 4 << 30)?;
    // Jobs' uids must pass through to their lease's directory.
    std::fs::set_permissions(v.path(), std::fs::Permissions::from_mode(0o711))
        .context("opening the scratch volume's root to jobs")?;
    Ok(())
}

/// `/run/netns` as a shared mount (as `ip netns` makes it), so that lease namespaces made
/// after the container booted appear in its bind of the folder.
fn shared_netns_dir() -> Result<()> {
    std::fs::create_dir_all(NETNS_DIR).context("creating /run/netns")?;
    let shared = || {
        std::process::Command::new("mount")
            .args(["--make-shared", NETNS_DIR])
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
    };
    if shared().context("running mount")? {
        return Ok(());
    }
    let bound = std::process::Command::new("mount")
        .args(["--bind", NETNS_DIR, NETNS_DIR])
        .status()
        .context("running mount")?;
    if !bound.success() || !shared().context("running mount")? {
        bail!("mount --make-shared {NETNS_DIR} failed");
    }
    Ok(())
}

fn short_hash(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(dir.as_os_str().as_encoded_bytes())[..4])
}

/// How many GPUs `MODEL:COUNT,...` simulates (bad parts count as none: the simulation
/// reports those itself).
fn sim_gpu_count(gpus: &str) -> u32 {
    gpus.split(',')
        .filter_map(|part| part.split_once(':')?.1.trim().parse::<u32>().ok())
        .sum()
}

/// The container's `/etc` starts empty: let its systemd find job users in `/run/userdb` as a
/// node's does (see `workload::accounts`).
fn resolve_users_from_userdb(root: &Path) -> Result<()> {
    let conf = root.join("etc/nsswitch.conf");
    std::fs::write(
        &conf,
        "passwd: files systemd\ngroup: files systemd\nshadow: files\n",
    )
    .with_context(|| format!("writing {}", conf.display()))
}

/// `/dev/nvidiactl` and `/dev/nvidia0..n` as character devices of the NVIDIA major. With no
/// driver behind them an allowed node opens with ENXIO and a denied one with EPERM, so the
/// device rules are tested for real without a GPU.
fn make_gpu_nodes(root: &Path, count: u32) -> Result<()> {
    use crate::workload::devices::{gpu_node, NVIDIACTL_MINOR, NVIDIA_MAJOR};
    let nodes = std::iter::once(("/dev/nvidiactl".to_owned(), NVIDIACTL_MINOR))
        .chain((0..count).map(|i| (gpu_node(i), i)));
    for (path, minor) in nodes {
        let at = root.join(path.trim_start_matches('/'));
        if at.exists() {
            continue;
        }
        let status = std::process::Command::new("mknod")
            .args(["-m", "0666"])
            .arg(&at)
            .args(["c", &NVIDIA_MAJOR.to_string(), &minor.to_string()])
            .status()
            .context("running mknod")?;
        if !status.success() {
            bail!("mknod {} failed ({status})", at.display());
        }
    }
    Ok(())
}

/// Points the simulated GPUs' clock at the node's clock (same epoch and scale).
pub fn set_sim_clock(clock: &Clock) {
    std::env::set_var("NVML_SIM_CLOCK", clock.sim_env());
}

/// What to print once the node is up.
pub fn banner(dir: &Path, cfg: &Config, jobs: &crate::daemon::WorkloadSetup) -> String {
    let d = dir.display();
    let jobs = match &jobs.bus {
        Ok(_) => "Jobs run for real under a private systemd 252 (systemd-nspawn).".to_owned(),
        Err(why) => format!(
            "Jobs are OFF: {why}.\nTo run jobs, install systemd-nspawn (apt-get install systemd-container) and run hostd dev as root.",
            why = report(why)
        ),
    };
    format!(
        r#"
Sovereign Host dev node "{node}" is running on https://{listen} ({scale}× time).
Dev PKI, config and state are in {d}/. {jobs}
In another terminal, try:

  sovctl --profile {d}/operator tenant create --id hyd-speech --name "Hyderabad Speech Labs" --jurisdiction IN-TG
  sovctl --profile {d}/operator gpus
  sovctl --profile {d}/hyd-speech lease create --tenant hyd-speech --gpus 1 --model H100 --classification restricted --dataset telugu-asr-raw
  sovctl --profile {d}/hyd-speech lease list
  sovctl --profile {d}/hyd-speech job run --lease <LEASE-ID> -- /bin/sh -c 'echo hello from $(id -u); ls -l /dev/nvidia*'
  sovctl --profile {d}/hyd-speech lease end <LEASE-ID>
  sovctl --profile {d}/hyd-speech bill --tenant hyd-speech
  sovctl --profile {d}/auditor audit export --out audit-export
  sovctl audit verify audit-export --vkey {d}/state/log.vkey

With simulated CC GPUs (`hostd dev --gpus H100:4 --cc on`), appraise the node's attestation:

  sovctl --profile {d}/operator attest --nonce-random --reference {d}/reference.json \
    --nvidia-root {d}/nvidia-roots.pem --rim {d}/rims --rim-root {d}/rim-root.pem \
    --enrollment-authority {d}/enrollment-authority.key.pub

(`cargo run --release --bin sovctl -- ...` works where sovctl is not on PATH.)
Stop with Ctrl-C.
"#,
        node = cfg.node.name,
        listen = cfg.api.listen,
        scale = cfg.metering.time_scale,
    )
}

#[cfg(test)]
mod tests;
