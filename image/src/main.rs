//! `image`: builds the Sovereign Host image (`image build`) and re-resolves its package lock
//! (`image lock`). See docs/image.md.

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

const IMAGE_DIR: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Debug, Parser)]
#[command(name = "image", about = "Build the Sovereign Host image")]
enum Cli {
    /// Re-resolve packages.toml against the Debian archive into packages.lock (on purpose:
    /// review and commit the diff).
    Lock {
        /// The image folder holding packages.toml and packages.lock.
        #[arg(long, default_value = IMAGE_DIR)]
        dir: PathBuf,
    },
    /// Build the image: uki.efi, esp.img, root.erofs, root.verity and the signed manifest.json.
    Build(BuildArgs),
    /// Make a node's provisioning disk (ext4 labelled SOVPROVISION) from a folder holding its
    /// hostd.toml and the files it names.
    Provision {
        /// The node's folder.
        #[arg(long)]
        from: PathBuf,
        /// The disk image to write.
        #[arg(long)]
        out: PathBuf,
        /// Its size in MiB.
        #[arg(long, default_value_t = 16)]
        size_mib: u32,
    },
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// Output folder (new or empty).
    #[arg(long)]
    out: PathBuf,
    /// The image folder of the checkout being built, holding packages.lock and files/ (by
    /// default the one this program was compiled from).
    #[arg(long, default_value = IMAGE_DIR)]
    dir: PathBuf,
    /// The production hostd (`cargo build --release -p hostd --no-default-features`).
    #[arg(long)]
    hostd: PathBuf,
    /// The initrd's init (`cargo build --release -p sovereign-init`).
    #[arg(long)]
    init: PathBuf,
    /// Release key (`sovctl attest keygen`) that signs manifest.json.
    #[arg(long)]
    release_key: PathBuf,
    /// Folder of downloaded packages, kept between builds.
    #[arg(long, default_value = "target/image-debs")]
    cache: PathBuf,
    /// Timestamp of every file and header (seconds); required for a reproducible build.
    #[arg(long, env = "SOURCE_DATE_EPOCH")]
    source_date_epoch: u64,
    /// Image version (os-release and manifest).
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    version: String,
    /// The state disk's block device: a stable path of the node's hardware.
    #[arg(long, default_value = "/dev/disk/by-id/virtio-sovereign-state")]
    state_device: String,
    /// Build the test variant with this simulated NVML library (libnvidia_ml_sim.so); its
    /// manifest is named `sovereign-host-simulated-gpus`.
    #[arg(long)]
    simulated_nvml: Option<PathBuf>,
    /// Words appended to the kernel command line (measured like the rest).
    #[arg(long, default_value = "")]
    extra_cmdline: String,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli {
        Cli::Lock { dir } => lock(dir),
        Cli::Build(args) => build(args),
        Cli::Provision {
            from,
            out,
            size_mib,
        } => {
            image::provision::make_disk(&from, &out, size_mib)?;
            println!("wrote {}", out.display());
            Ok(())
        }
    }
}

fn lock(dir: PathBuf) -> Result<()> {
    let spec_path = dir.join("packages.toml");
    let text = std::fs::read_to_string(&spec_path)
        .with_context(|| format!("reading {}", spec_path.display()))?;
    let spec = image::lock::Spec::parse(&text)?;
    let lock = image::apt::resolve(&spec)?;
    let out = dir.join("packages.lock");
    std::fs::write(&out, lock.render()).with_context(|| format!("writing {}", out.display()))?;
    println!("{}: {} packages", out.display(), lock.packages.len());
    Ok(())
}

fn build(args: BuildArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let dir = args.dir.clone();
    let lock_path = dir.join("packages.lock");
    let lock = image::lock::Lock::parse(
        &std::fs::read_to_string(&lock_path)
            .with_context(|| format!("reading {}", lock_path.display()))?,
    )?;
    let seed = keyfile::read_ed25519_seed(&args.release_key)
        .with_context(|| format!("release key {}", args.release_key.display()))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let spec = image::build::BuildSpec {
        lock,
        cache: args.cache,
        out: args.out.clone(),
        hostd: args.hostd,
        init: args.init,
        files: dir.join("files"),
        epoch: args.source_date_epoch,
        version: args.version,
        simulated_nvml: args.simulated_nvml,
        state_device: args.state_device,
        extra_cmdline: args.extra_cmdline,
    };
    let built = image::build::build(&spec)?;
    let signed = image::build::write_signed_manifest(&args.out, built.manifest, &key)
        .inspect_err(|_| image::build::discard(&args.out))?;
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    println!(
        "built {} {} in {:.1} s: uki.efi {} bytes, root.erofs {} bytes; pcr.11 {}",
        signed.manifest.name,
        signed.manifest.version,
        started.elapsed().as_secs_f64(),
        size(&built.uki),
        size(&built.root),
        hex::encode(
            signed
                .manifest
                .measurements
                .get("pcr.11")
                .copied()
                .unwrap_or_default()
        ),
    );
    Ok(())
}
