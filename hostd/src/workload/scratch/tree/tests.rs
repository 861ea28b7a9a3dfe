use super::*;
use std::os::unix::fs::symlink;

/// Makes `depth` nested directories named `name` under `root` the way a job can (each made
/// relative to the one above, so no path is ever longer than one name), with a file of
/// `bytes` at the bottom.
fn nest(root: &Path, name: &str, depth: usize, bytes: usize) {
    let name = CString::new(name).expect("a name");
    let mut fd = open_dir(fs::CWD, &c_path(root).expect("a path")).expect("the root");
    for _ in 0..depth {
        fs::mkdirat(&fd, &name, Mode::RWXU).expect("mkdirat");
        fd = open_dir(&fd, &name).expect("openat");
    }
    let f = fs::openat(
        &fd,
        c"data",
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )
    .expect("a file");
    rustix::io::write(&f, &vec![7u8; bytes]).expect("written");
}

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("a thread")
        .join()
        .expect("no panic")
}

#[test]
fn counts_regular_files_at_their_length_or_blocks_and_not_links() {
    let d = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("big"), vec![0u8; 100_000]).expect("write");
    std::fs::create_dir_all(d.path().join("a/b")).expect("mkdir");
    std::fs::write(d.path().join("a/b/f"), vec![1u8; 10_000]).expect("write");
    std::fs::write(d.path().join("g"), b"x").expect("write");
    symlink(outside.path(), d.path().join("a/link")).expect("symlink");
    let n = bytes(d.path()).expect("counted");
    // 10,000 bytes take three 4 KiB blocks; one byte takes one block (or none, inline).
    assert!((10_001..=16_384).contains(&n), "{n}");
    assert!(outside.path().join("big").exists());
}

/// A tree deeper than any path can name (`PATH_MAX` is 4096 bytes) is counted and deleted,
/// on a thread stack far smaller than the daemon's, which a recursive walk would overflow.
#[test]
fn a_tree_deeper_than_any_path_is_counted_and_deleted_without_recursion() {
    let d = tempfile::tempdir().expect("tempdir");
    let top = d.path().join("lease");
    std::fs::create_dir(&top).expect("mkdir");
    nest(&top, &"n".repeat(200), 3_000, 5_000);
    let t = top.clone();
    let n = on_small_stack(move || bytes(&t)).expect("counted");
    assert!((5_000..=8_192).contains(&n), "{n}");
    let t = top.clone();
    on_small_stack(move || delete(&t)).expect("deleted");
    assert!(!top.exists());
    assert!(d.path().exists(), "only the tree itself goes");
}

#[test]
fn a_wide_tree_is_counted_once_and_deleted_whole() {
    let d = tempfile::tempdir().expect("tempdir");
    let top = d.path().join("lease");
    for i in 0..300 {
        let sub = top.join(format!("d{i}/e"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join("f"), vec![2u8; 4096]).expect("write");
    }
    assert_eq!(bytes(&top).expect("counted"), 300 * 4096);
    delete(&top).expect("deleted");
    assert!(!top.exists());
}

#[test]
fn delete_removes_links_not_what_they_point_to() {
    let d = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("keep"), b"k").expect("write");
    let top = d.path().join("lease");
    std::fs::create_dir_all(top.join("x")).expect("mkdir");
    symlink(outside.path(), top.join("x/dir-link")).expect("symlink");
    symlink(outside.path().join("keep"), top.join("file-link")).expect("symlink");
    delete(&top).expect("deleted");
    assert!(!top.exists());
    assert!(outside.path().join("keep").exists());
}

#[test]
fn a_tree_already_gone_is_deleted_and_one_that_is_a_file_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    delete(&d.path().join("never-made")).expect("nothing to delete");
    std::fs::write(d.path().join("file"), b"f").expect("write");
    assert!(matches!(
        bytes(&d.path().join("file")),
        Err(TreeError::Io { .. })
    ));
}
