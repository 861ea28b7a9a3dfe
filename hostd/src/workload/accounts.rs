//! User and group records for the uids hostd gives leases' jobs.
//!
//! systemd 252 refuses `User=` with a numeric uid that no user database knows (the job then
//! fails with status 217/USER), and a node's `/etc` is part of its immutable image. So hostd
//! publishes each job uid as a JSON user record and group record in `/run/userdb/`, which
//! `nss-systemd` serves (the image's `nsswitch.conf` lists `systemd` for `passwd` and `group`,
//! as Debian's default does). Records live in `/run`: they vanish at reboot, as the leases'
//! processes do. The names say what they are (`sov-job-60001`); no home, no login shell, no
//! supplementary groups.

use std::path::{Path, PathBuf};

/// Why a record could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the user record {path}")]
pub struct AccountError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The user name of job uid `uid`.
pub fn user_name(uid: u32) -> String {
    format!("sov-job-{uid}")
}

fn user_record(uid: u32) -> String {
    serde_json::json!({
        "userName": user_name(uid),
        "uid": uid,
        "gid": uid,
        "realName": "Sovereign Host lease job",
        "homeDirectory": "/",
        "shell": "/usr/sbin/nologin",
        "locked": true,
        "disposition": "regular",
    })
    .to_string()
}

fn group_record(uid: u32) -> String {
    serde_json::json!({
        "groupName": user_name(uid),
        "gid": uid,
        "disposition": "regular",
    })
    .to_string()
}

/// Publishes user and group `uid` under `root` (`/` on a node; the container's root in dev
/// mode), by name and by number as nss-systemd looks them up. Idempotent.
pub fn ensure_job_user(root: &Path, uid: u32) -> Result<(), AccountError> {
    let dir = root.join("run/userdb");
    let name = user_name(uid);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| AccountError { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    for (ext, text) in [("user", user_record(uid)), ("group", group_record(uid))] {
        let file = dir.join(format!("{name}.{ext}"));
        if !file.exists() {
            let tmp = dir.join(format!(".{name}.{ext}.tmp"));
            std::fs::write(&tmp, text).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &file).map_err(io(&file))?;
        }
        let by_number = dir.join(format!("{uid}.{ext}"));
        if by_number.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(format!("{name}.{ext}"), &by_number)
                .map_err(io(&by_number))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_written_by_name_and_number_once() {
        let root = tempfile::tempdir().unwrap();
        ensure_job_user(root.path(), 60001).unwrap();
        ensure_job_user(root.path(), 60001).unwrap();
        let dir = root.path().join("run/userdb");
        let user: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("60001.user")).unwrap())
                .unwrap();
        assert_eq!(user["userName"], "sov-job-60001");
        assert_eq!(user["uid"], 60001);
        assert_eq!(user["shell"], "/usr/sbin/nologin");
        let group: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("60001.group")).unwrap())
                .unwrap();
        assert_eq!(group["gid"], 60001);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
    }
}
