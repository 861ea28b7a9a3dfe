//! `sovctl cp SRC DST`: copies one file into or out of a lease's encrypted scratch.
//!
//! Exactly one side names the lease, `LEASE-ID:PATH` with `PATH` relative to the scratch:
//! `sovctl cp data.tar lease-1a2b:datasets/data.tar` uploads, `sovctl cp lease-1a2b:model.pt
//! ./model.pt` downloads. A local path containing `:` is written `./a:b`: anything starting
//! with `/` or `.` is local. A remote path ending in `/` (or empty) takes the local file's
//! name, and so does a local destination that is a directory. A local directory as SRC is
//! refused unless `-r` is given: then its regular files are uploaded under the remote path
//! (`cp -r runs lease-1a2b:` puts `runs/a/x` at `runs/a/x`; `cp -r runs lease-1a2b:in`
//! at `in/a/x`), sorted, one request each; links and special files in it are refused before
//! anything is sent, and empty directories are not made. Downloads are of one file: a
//! remote directory is refused (`GET` on it lists it).
//!
//! Both directions stream: the file is never held in memory. A download is written beside
//! its destination and renamed over it when complete, so a failed one leaves nothing. A
//! progress bar shows on standard error when it is a terminal. Exit codes as every command:
//! 0 copied, 1 the node refused (no such lease or file, over quota, forbidden), 2 usage,
//! file or connection error.

use super::{print_json, CmdResult, Exit, Fail};
use crate::client::{Client, ClientError};
use attest::report::report;
use clap::Args;
use hostd_api::file::FileWritten;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

#[derive(Debug, Args)]
pub struct CpArgs {
    /// Source: a local file, or `LEASE-ID:PATH`.
    src: String,
    /// Destination: `LEASE-ID:PATH`, or a local file or directory.
    dst: String,
    /// No progress bar even on a terminal.
    #[arg(long, short)]
    quiet: bool,
    /// Copy a local directory's files (uploads only), keeping their relative paths.
    #[arg(long, short)]
    recursive: bool,
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Local(PathBuf),
    Lease { lease: String, path: String },
}

/// `LEASE-ID:PATH` when the part before the first `:` can be a lease id and the whole
/// does not start like a local path.
fn parse_end(s: &str) -> End {
    if !s.starts_with(['/', '.']) {
        if let Some((lease, path)) = s.split_once(':') {
            let id_like = !lease.is_empty()
                && lease.len() <= 64
                && lease
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if id_like {
                return End::Lease {
                    lease: lease.to_owned(),
                    path: path.to_owned(),
                };
            }
        }
    }
    End::Local(PathBuf::from(s))
}

/// `sovctl cp`.
pub async fn cp(c: Client, args: CpArgs, json_out: bool) -> CmdResult {
    let bar = progress_bar(args.quiet);
    match (parse_end(&args.src), parse_end(&args.dst)) {
        (End::Local(src), End::Lease { lease, path }) => {
            upload(&c, &src, (&lease, &path), bar, args.recursive, json_out).await
        }
        (End::Lease { lease, path }, End::Local(dst)) => {
            download(&c, &lease, &path, &dst, bar).await
        }
        (End::Local(_), End::Local(_)) => Err(Fail::usage(
            "one side must be LEASE-ID:PATH (e.g. sovctl cp data.tar lease-1a2b:data.tar); \
             use cp for local copies",
        )),
        (End::Lease { .. }, End::Lease { .. }) => Err(Fail::usage(
            "only one side may be LEASE-ID:PATH: copy between leases through a local file",
        )),
    }
}

/// The remote path, with the local file's name when it names a directory (`dir/`, ``).
fn remote_target(path: &str, src: &Path) -> Result<String, Fail> {
    if !(path.is_empty() || path.ends_with('/')) {
        return Ok(path.to_owned());
    }
    let name = src
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Fail::usage(format!("{} has no file name", src.display())))?;
    Ok(format!("{path}{name}"))
}

async fn upload(
    c: &Client,
    src: &Path,
    to: (&str, &str),
    bar: ProgressBar,
    recursive: bool,
    json_out: bool,
) -> CmdResult {
    let (lease, path) = to;
    let meta = std::fs::metadata(src).map_err(|e| {
        Fail::usage(format!(
            "cannot read {}: {e}",
            src.display(),
            e = report(&e)
        ))
    })?;
    let target = remote_target(path, src)?;
    let files = match (meta.is_dir(), recursive) {
        (false, _) => vec![(src.to_owned(), target, meta.len())],
        (true, true) => walk(src, &target)?,
        (true, false) => {
            return Err(Fail::usage(format!(
                "{} is a directory: copy it with -r (its files; links are refused)",
                src.display()
            )))
        }
    };
    bar.set_length(files.iter().map(|f| f.2).sum());
    let mut written = Vec::with_capacity(files.len());
    for (local, remote, _) in files {
        let w = upload_one(c, &local, lease, &remote, &bar).await;
        if w.is_err() {
            bar.finish_and_clear();
        }
        let w = w?;
        if !json_out {
            bar.suspend(|| println!("{lease}:{} ({} bytes)", w.path, w.bytes));
        }
        written.push(w);
    }
    bar.finish_and_clear();
    match (json_out, recursive) {
        (true, false) => print_json(&written[0])?,
        (true, true) => print_json(&written)?,
        _ => {}
    }
    Ok(Exit::Ok)
}

/// One file up, the bar moving on from where the files before it left it; sent again, from
/// its start, while the node throttles it and the waits fit in the client's
/// [`Client::throttle_wait`] (a `cp -r` of many small files goes at the tenant's request rate).
async fn upload_one(
    c: &Client,
    src: &Path,
    lease: &str,
    remote: &str,
    bar: &ProgressBar,
) -> Result<FileWritten, Fail> {
    let base = bar.position();
    let mut waited = std::time::Duration::ZERO;
    loop {
        let (file, len) = open_source(src).await?;
        let b = bar.clone();
        let sent = c.upload(lease, remote, file, len, move |n| b.set_position(base + n));
        match sent.await {
            Err(ClientError::Throttled { after, .. }) if waited + after <= c.throttle_wait() => {
                bar.set_position(base);
                tokio::time::sleep(after).await;
                waited += after;
            }
            answer => return Ok(answer?),
        }
    }
}

/// The file to send, and its length now.
async fn open_source(src: &Path) -> Result<(tokio::fs::File, u64), Fail> {
    let cannot = |what: &str, e: std::io::Error| {
        Fail::usage(format!(
            "cannot {what} {}: {e}",
            src.display(),
            e = report(&e)
        ))
    };
    let file = tokio::fs::File::open(src)
        .await
        .map_err(|e| cannot("open", e))?;
    let len = file.metadata().await.map_err(|e| cannot("read", e))?.len();
    Ok((file, len))
}

/// The regular files under `dir` as (local path, remote path under `target`, bytes), sorted.
/// Links and special files are refused rather than followed or silently left out.
fn walk(dir: &Path, target: &str) -> Result<Vec<(PathBuf, String, u64)>, Fail> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_owned(), target.trim_end_matches('/').to_owned())];
    while let Some((local, remote)) = todo.pop() {
        let read = |e| {
            Fail::usage(format!(
                "cannot read {}: {e}",
                local.display(),
                e = report(&e)
            ))
        };
        for entry in std::fs::read_dir(&local).map_err(read)? {
            let entry = entry.map_err(read)?;
            let path = entry.path();
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| Fail::usage(format!("{} is not a UTF-8 name", path.display())))?;
            let meta = std::fs::symlink_metadata(&path).map_err(read)?;
            let remote = format!("{remote}/{name}");
            if meta.is_dir() {
                todo.push((path, remote));
            } else if meta.is_file() {
                out.push((path, remote, meta.len()));
            } else {
                return Err(Fail::usage(format!(
                    "{} is a link or special file: not copied (copy its target by name)",
                    path.display()
                )));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

async fn download(c: &Client, lease: &str, path: &str, dst: &Path, bar: ProgressBar) -> CmdResult {
    let dst = if dst.is_dir() {
        let name = Path::new(path)
            .file_name()
            .ok_or_else(|| Fail::usage(format!("{lease}:{path} does not name a file")))?;
        dst.join(name)
    } else {
        dst.to_owned()
    };
    let part = part_name(&dst);
    let file = tokio::fs::File::create(&part).await.map_err(|e| {
        Fail::usage(format!(
            "cannot create {}: {e}",
            part.display(),
            e = report(&e)
        ))
    })?;
    let mut out = Counting {
        inner: file,
        bar: bar.clone(),
    };
    let got = c.download_file(lease, path, &mut out).await;
    bar.finish_and_clear();
    drop(out);
    let got = match got {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e.into());
        }
    };
    std::fs::rename(&part, &dst).map_err(|e| {
        Fail::usage(format!(
            "cannot write {}: {e}",
            dst.display(),
            e = report(&e)
        ))
    })?;
    println!("{} ({got} bytes)", dst.display());
    Ok(Exit::Ok)
}

/// `DIR/.NAME.sovctl-part`: beside the destination, so the final rename stays on its
/// file system.
fn part_name(dst: &Path) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dst.with_file_name(format!(".{name}.sovctl-part"))
}

fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// A writer that moves the progress bar by what it writes.
struct Counting<W> {
    inner: W,
    bar: ProgressBar,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counting<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.bar.inc(n as u64);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_side_names_the_lease() {
        let lease = |l: &str, p: &str| End::Lease {
            lease: l.into(),
            path: p.into(),
        };
        assert_eq!(
            parse_end("lease-1a2b:data/x.tar"),
            lease("lease-1a2b", "data/x.tar")
        );
        assert_eq!(parse_end("l:"), lease("l", ""));
        for local in ["data.tar", "./a:b", "/abs/a:b", "../x:y", "a b:c", ":x"] {
            assert_eq!(parse_end(local), End::Local(local.into()), "{local}");
        }
    }

    #[test]
    fn a_directory_target_takes_the_file_name() {
        let src = Path::new("/tmp/model.pt");
        assert_eq!(remote_target("", src).unwrap(), "model.pt");
        assert_eq!(remote_target("out/", src).unwrap(), "out/model.pt");
        assert_eq!(remote_target("out/m.pt", src).unwrap(), "out/m.pt");
        assert_eq!(
            part_name(Path::new("/x/y/m.pt")),
            Path::new("/x/y/.m.pt.sovctl-part")
        );
    }
}
