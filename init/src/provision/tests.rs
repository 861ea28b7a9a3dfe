use super::*;
use crate::probe::{ext4_label, read_head, PROBE_LEN};
use std::os::unix::fs::{symlink, MetadataExt};
use std::process::Command;

/// A real ext4 image from mkfs.ext4, labelled `label`, as `image provision` makes one.
fn ext4_image(path: &Path, label: &str) {
    let status = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", label])
        .arg(path)
        .arg("4M")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("mkfs.ext4 (e2fsprogs)");
    assert!(status.success());
}

fn head(path: &Path) -> Vec<u8> {
    read_head(path).unwrap()
}

#[test]
fn the_label_is_read_from_mkfs_ext4s_superblock() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    ext4_image(&disk, LABEL);
    assert_eq!(ext4_label(&head(&disk)), Some(LABEL.as_bytes()));
    ext4_image(&disk, "other");
    assert_eq!(ext4_label(&head(&disk)), Some(b"other".as_slice()));
    assert_eq!(ext4_label(&[0u8; PROBE_LEN]), None);
    assert_eq!(ext4_label(&[0u8; 100]), None);
}

/// A block class listing `names` whose device nodes (in `dev`) are the given images.
fn devices(root: &Path, disks: &[(&str, Option<&str>)]) -> (PathBuf, PathBuf) {
    let (class, dev) = (root.join("class"), root.join("dev"));
    fs::create_dir_all(&class).unwrap();
    fs::create_dir_all(&dev).unwrap();
    for (name, label) in disks {
        fs::create_dir(class.join(name)).unwrap();
        match label {
            Some(label) => ext4_image(&dev.join(name), label),
            None => fs::write(dev.join(name), vec![0u8; 8192]).unwrap(),
        }
    }
    (class, dev)
}

#[test]
fn the_one_labelled_disk_is_found_and_two_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (class, dev) = devices(
        dir.path(),
        &[("vda", None), ("vdb", Some("state")), ("vdc", Some(LABEL))],
    );
    // A listed device without a node is passed over, as one that cannot be read, and so is
    // a suspended device-mapper device (its reads would wait), whatever it holds.
    fs::create_dir(class.join("vdz")).unwrap();
    fs::create_dir_all(class.join("dm-0/dm")).unwrap();
    fs::write(class.join("dm-0/dm/suspended"), "1\n").unwrap();
    ext4_image(&dev.join("dm-0"), LABEL);
    assert_eq!(find_disk(&class, &dev).unwrap(), Some(dev.join("vdc")));
    ext4_image(&dev.join("vda"), LABEL);
    let err = find_disk(&class, &dev).unwrap_err();
    assert!(
        matches!(&err, ProvisionError::Ambiguous { first, second }
            if *first == dev.join("vda") && *second == dev.join("vdc")),
        "{err}"
    );
    let none = tempfile::tempdir().unwrap();
    let (class, dev) = devices(none.path(), &[("vda", None)]);
    assert_eq!(find_disk(&class, &dev).unwrap(), None);
}

fn places(root: &Path, class: PathBuf, dev: PathBuf) -> Places {
    let state = root.join("state");
    fs::create_dir_all(&state).unwrap();
    Places {
        state,
        mount_at: root.join("mnt"),
        class,
        dev,
    }
}

#[test]
fn a_provisioned_node_reads_nothing_and_a_missing_disk_is_waited_for_only_in_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let (class, dev) = devices(dir.path(), &[("vda", None)]);
    let p = places(dir.path(), class, dev);
    assert_eq!(provision(&p, Duration::ZERO).unwrap(), Provisioned::NoDisk);
    let err = provision(&p, Duration::from_millis(60)).unwrap_err();
    assert!(matches!(err, ProvisionError::NoDisk { .. }), "{err}");
    assert!(err.to_string().contains(LABEL), "{err}");
    fs::create_dir(p.state.join(PROVISIONED)).unwrap();
    fs::write(p.state.join(PROVISIONED).join(CONFIG), "").unwrap();
    // Even with two labelled disks attached: a provisioned node does not look.
    ext4_image(&p.dev.join("vda"), LABEL);
    ext4_image(&p.dev.join("vdb"), LABEL);
    fs::create_dir(p.class.join("vdb")).unwrap();
    assert_eq!(provision(&p, Duration::ZERO).unwrap(), Provisioned::Already);
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// The node folder a provisioning disk holds: a config, a key, a sub-folder, as the
/// operator's `cp -a` left them (their modes; the key the operator's, uid 1000).
fn node_folder(root: &Path) -> PathBuf {
    let node = root.join("disk").join(NODE_DIR);
    fs::create_dir_all(node.join("server")).unwrap();
    fs::write(node.join(CONFIG), "listen = \"0.0.0.0:7443\"\n").unwrap();
    fs::write(node.join("server/key.pem"), "secret").unwrap();
    fs::set_permissions(
        node.join("server/key.pem"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    fs::set_permissions(node.join(CONFIG), fs::Permissions::from_mode(0o4644)).unwrap();
    fs::set_permissions(node.join("server"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&node, fs::Permissions::from_mode(0o755)).unwrap();
    // Giving a file away needs root (as the tests run in CI); elsewhere the files stay the
    // test's own uid, which the copy must still replace with root's.
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(node.join("server/key.pem"), Some(1000), Some(1000)).unwrap();
        std::os::unix::fs::chown(node.join("server"), Some(1000), Some(1000)).unwrap();
    }
    node
}

fn owner(path: &Path) -> (u32, u32) {
    let meta = fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.gid())
}

#[test]
fn the_node_folder_is_copied_as_roots_alone_and_a_torn_copy_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_folder(dir.path());
    let state = dir.path().join("state");
    // What a power cut during an earlier copy left.
    fs::create_dir_all(state.join("provisioned.new/stale")).unwrap();
    let files = copy_node_folder(Path::new("/dev/vdz"), &node, &state).unwrap();
    assert_eq!(files, 2);
    let done = state.join(PROVISIONED);
    assert!(!state.join("provisioned.new").exists());
    assert_eq!(
        fs::read_to_string(done.join(CONFIG)).unwrap(),
        "listen = \"0.0.0.0:7443\"\n"
    );
    assert_eq!(fs::read(done.join("server/key.pem")).unwrap(), b"secret");
    if rustix::process::geteuid().is_root() {
        assert_eq!(owner(&node.join("server/key.pem")), (1000, 1000));
    }
    // Whatever the disk said (0644, set-uid 0644, 0755, uid 1000): root's alone.
    for file in [CONFIG, "server/key.pem"] {
        assert_eq!(mode(&done.join(file)), 0o600, "{file}");
        assert_eq!(owner(&done.join(file)), (0, 0), "{file}");
    }
    for folder in [done.clone(), done.join("server")] {
        assert_eq!(mode(&folder), 0o700, "{folder:?}");
        assert_eq!(owner(&folder), (0, 0), "{folder:?}");
    }
}

#[test]
fn links_and_a_missing_node_folder_are_refused_and_nothing_lands() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_folder(dir.path());
    let state = dir.path().join("state");
    fs::create_dir_all(&state).unwrap();
    let device = Path::new("/dev/vdz");
    symlink("/etc/shadow", node.join("server/cert.pem")).unwrap();
    let err = copy_node_folder(device, &node, &state).unwrap_err();
    assert!(
        matches!(&err, ProvisionError::NotCopied { path } if *path == node.join("server/cert.pem")),
        "{err}"
    );
    assert!(!state.join(PROVISIONED).exists());
    let err = copy_node_folder(device, &dir.path().join("empty/node"), &state).unwrap_err();
    assert!(matches!(err, ProvisionError::NoNodeFolder { .. }), "{err}");
}

#[test]
fn an_existing_provisioned_folder_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_folder(dir.path());
    let state = dir.path().join("state");
    // hostd's own state lives in provisioned/: a folder without the config is not replaced.
    fs::create_dir_all(state.join(PROVISIONED).join("state")).unwrap();
    // A staging copy an earlier attempt left: keys on the state disk nobody uses.
    fs::create_dir_all(state.join("provisioned.new/server")).unwrap();
    let err = copy_node_folder(Path::new("/dev/vdz"), &node, &state).unwrap_err();
    let done = state.join(PROVISIONED);
    assert!(
        matches!(&err, ProvisionError::ProvisionedExists { path } if *path == done),
        "{err}"
    );
    assert!(err.to_string().contains("has no hostd.toml"), "{err}");
    assert!(state.join(PROVISIONED).join("state").is_dir());
    assert!(!state.join(PROVISIONED).join(CONFIG).exists());
    // Refused before the copy: no staging copy of the keys is left behind.
    assert!(!state.join("provisioned.new").exists());
}

#[test]
fn the_state_disk_is_where_the_initrd_and_the_root_mount_it() {
    let initrd = Places::in_root(Path::new("/sysroot"), "/provision");
    assert_eq!(initrd.state, Path::new("/sysroot/var/lib/hostd"));
    assert_eq!(initrd.mount_at, Path::new("/provision"));
    let root = Places::in_root(Path::new("/"), "/run/provision");
    assert_eq!(root.state, Path::new("/var/lib/hostd"));
    assert_eq!(root.class, Path::new("/sys/class/block"));
}
