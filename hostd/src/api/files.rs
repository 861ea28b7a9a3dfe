//! `/v1/leases/{id}/files/{path}`: data into and out of a lease's encrypted scratch.
//!
//! `PUT` streams the body to disk (never whole in memory) under a temporary name and renames
//! it into place when complete, answering 201 [`FileWritten`]; `GET` streams a file, or
//! answers a directory's [`FileList`] as JSON. Paths are relative to the scratch, and every
//! open is confined to it by the kernel (see `workload::confined`), because a tenant's job
//! can swap a directory for a symlink while hostd, as root, writes.
//!
//! Access: a tenant its own leases (another's answers 404), operators all. File contents are
//! tenant data, so auditors, who read everything else, get 403 here.
//!
//! Residency: a download (a file, or a directory's listing: names are data too) takes the
//! lease's data off the node to the client's address, so it is an `egress` decision of the
//! residency policy for the lease's tenant and classification, with the TLS peer's IP as the
//! destination: the same endpoints and rules that bound the lease's jobs. A refusal is 403
//! with the policy's reasons, before any file is opened. Uploads bring data in and are always
//! allowed. Every transfer, refused or not, becomes a `transfer` record in the signed ledger
//! when it ends, with the bytes moved and whether it completed.
//!
//! An upload is not bound by the API's small JSON body limit nor its whole-body deadline
//! (its route bypasses `limits::enforce`): its limit is the lease's remaining scratch quota
//! (a `Content-Length` over it is refused with 507 before a byte is read; a body without one
//! is cut at the quota), and its deadline is per piece: a client that sends nothing for
//! `[api] body_deadline_secs` is cut off with 408, however long the whole upload takes.
//! The remaining quota is read once, when the upload starts: a file being replaced still
//! counts until the rename, and bytes a job or another upload writes meanwhile are not
//! seen (the kernel enforces no quota on scratch). The scratch is measured (a walk of its
//! tree) at most every few seconds, and a finished upload's bytes count at once until the
//! next measurement; what a job writes counts from the next one (`Jobs::scratch_used`).

use super::leases::visible_lease;
use super::*;
use crate::node::TransferFacts;
use crate::residency::TransferDecision;
use crate::workload::confined::{FileError, Kind, Opened, RelPath, Root, Upload};
use crate::workload::runner::NodeJobs;
use crate::workload::scratch::ScratchError;
use attest::report::report;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use hostd_api::file::{FileEntry, FileKind, FileList, FileWritten};
use http_body_util::BodyExt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes read from disk per piece of a download.
const CHUNK: usize = 256 * 1024;

impl From<FileError> for ApiError {
    fn from(e: FileError) -> ApiError {
        let status = match &e {
            FileError::BadPath { .. } | FileError::Symlink { .. } => StatusCode::BAD_REQUEST,
            FileError::NotRegular { .. } => StatusCode::BAD_REQUEST,
            FileError::NotFound { .. } => StatusCode::NOT_FOUND,
            FileError::NotADirectory { .. } | FileError::IsADirectory { .. } => {
                StatusCode::CONFLICT
            }
            FileError::Io { .. } => return ApiError::internal(&e),
        };
        ApiError::new(status, report(&e).to_string())
    }
}

/// The lease, if the principal may touch its files: auditors never (403), tenants their
/// own (404 otherwise), operators all.
async fn lease_for(node: &Arc<Node>, p: &Principal, id: String, what: &str) -> ApiResult<Lease> {
    if p.role == Role::Auditor {
        return Err(ApiError::forbidden(p, what));
    }
    let who = p.clone();
    blocking(node, move |n| visible_lease(n, &who, &id)).await
}

/// The lease's scratch opened as a confinement root, made if the lease has none yet.
async fn scratch_root(jobs: &NodeJobs, lease: &Lease) -> ApiResult<Root> {
    let (dir, uid) = jobs.scratch_for(lease).await?;
    run_blocking(move || Root::open(&dir, uid)).await
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(ApiError::from)
}

/// Bytes the lease may still add to its scratch. The runner only answers "would `more`
/// fit?", and its refusal carries the usage and the quota: asking about an impossible
/// amount reads both in one walk of the tree.
fn remaining_quota(jobs: &NodeJobs, lease: &str) -> Result<u64, NodeError> {
    const PROBE: u64 = 1 << 62;
    match jobs.check_scratch_quota(lease, PROBE) {
        Ok(()) => Ok(PROBE),
        Err(ScratchError::OverQuota { would, quota, .. }) => {
            Ok(quota.saturating_sub(would.saturating_sub(PROBE)))
        }
        Err(e) => Err(NodeError::Internal(crate::node::InternalError {
            context: "reading a lease's scratch quota".into(),
            source: Box::new(e),
        })),
    }
}

fn over_quota(lease: &str, bytes: u64, remaining: u64) -> ApiError {
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        format!(
            "{bytes} bytes do not fit in lease {lease}'s scratch: {remaining} bytes of its \
             quota are left"
        ),
    )
}

/// One transfer, logged and recorded in the ledger when it ends (completed or not) with the
/// bytes moved: on drop, so a client that goes away mid-body is recorded too.
pub(super) struct Transfer {
    /// Where the record goes; `None` only in unit tests of the byte counting.
    node: Option<Arc<Node>>,
    tenant: String,
    lease: String,
    path: String,
    direction: &'static str,
    bytes: u64,
    complete: bool,
    client: IpAddr,
    decision: TransferDecision,
}

impl Drop for Transfer {
    fn drop(&mut self) {
        tracing::info!(
            tenant = %self.tenant,
            lease = %self.lease,
            path = %self.path,
            bytes = self.bytes,
            direction = self.direction,
            complete = self.complete,
            client = %self.client,
            "scratch file transfer"
        );
        let Some(node) = self.node.take() else {
            return;
        };
        let facts = TransferFacts {
            tenant: std::mem::take(&mut self.tenant),
            lease: std::mem::take(&mut self.lease),
            direction: self.direction,
            bytes: self.bytes,
            complete: self.complete,
            client: self.client.to_string(),
            decision: self.decision.clone(),
        };
        // A ledger append waits on disk: never on the runtime thread that drops the body.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || record(&node, &facts))),
            Err(_) => record(&node, &facts),
        }
    }
}

/// Appends the record of a transfer; the transfer already happened, so a failure can only be
/// logged (loudly: the ledger is missing a transfer).
fn record(node: &Node, facts: &TransferFacts) {
    if let Err(e) = node.record_transfer(facts) {
        tracing::error!(
            tenant = %facts.tenant,
            lease = %facts.lease,
            direction = facts.direction,
            bytes = facts.bytes,
            error = %report(&e),
            "transfer not recorded in the ledger"
        );
    }
}

impl Transfer {
    /// `path` names what is transferred in the node's log (the ledger's record has no path).
    pub(super) fn new(
        node: &Arc<Node>,
        lease: &Lease,
        path: String,
        direction: &'static str,
        client: IpAddr,
        decision: TransferDecision,
    ) -> Transfer {
        Transfer {
            node: Some(node.clone()),
            tenant: lease.tenant.clone(),
            lease: lease.id.clone(),
            path,
            direction,
            bytes: 0,
            complete: false,
            client,
            decision,
        }
    }

    /// Counts `n` more bytes as transferred.
    pub(super) fn sent(&mut self, n: u64) {
        self.bytes = self.bytes.saturating_add(n);
    }

    /// Marks the transfer as complete: everything there was went.
    pub(super) fn finished(&mut self) {
        self.complete = true;
    }
}

/// The client's address as the policy and the record see it (an IPv4 client of a dual-stack
/// listener as IPv4).
pub(super) fn client_ip(peer: SocketAddr) -> IpAddr {
    policy::cidr::canonical_ip(peer.ip())
}

/// The policy's decision on the lease's data leaving for `client`. A refusal is recorded at
/// once (0 bytes) and answered 403 with the policy's digest and reasons.
pub(super) async fn decide_download(
    node: &Arc<Node>,
    lease: &Lease,
    what: &str,
    client: IpAddr,
) -> ApiResult<TransferDecision> {
    let d =
        node.residency()
            .check_download(&lease.tenant, &lease.classification, &lease.id, client);
    if d.allowed {
        return Ok(d);
    }
    tracing::warn!(
        tenant = %lease.tenant,
        lease = %lease.id,
        path = %what,
        client = %client,
        reasons = ?d.reasons,
        "download denied by residency policy"
    );
    let facts = TransferFacts {
        tenant: lease.tenant.clone(),
        lease: lease.id.clone(),
        direction: "out",
        bytes: 0,
        complete: false,
        client: client.to_string(),
        decision: d.clone(),
    };
    // Refused either way: a refusal the ledger could not take is logged by `record`.
    let _ = tokio::task::spawn_blocking({
        let node = node.clone();
        move || record(&node, &facts)
    })
    .await;
    Err(ApiError::denied(
        "download denied by residency policy",
        d.policy_digest,
        d.reasons,
    ))
}

/// `PUT /v1/leases/{id}/files/{*path}`.
pub(super) async fn put_file(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((id, path)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let lease = lease_for(&node, &p, id, "write a lease's files").await?;
    let rel = RelPath::parse(&path)?;
    let tenant = lease.tenant.clone();
    blocking(&node, move |n| n.check_tenant_active(&tenant).map(drop)).await?;
    let jobs = w.jobs()?.clone();
    let root = scratch_root(&jobs, &lease).await?;
    let remaining = {
        let (jobs, id) = (jobs.clone(), lease.id.clone());
        blocking(&node, move |_| remaining_quota(&jobs, &id)).await?
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|&len| len > remaining) {
        return Ok(closing(over_quota(&lease.id, len, remaining)));
    }
    let target = rel.clone();
    let mut upload = run_blocking(move || root.create(&target)).await?;
    let decision = TransferDecision::upload(&node.residency().digest());
    let mut t = Transfer::new(
        &node,
        &lease,
        rel.as_string(),
        "in",
        client_ip(peer),
        decision,
    );
    let idle = Duration::from_secs(node.config().api.body_deadline_secs.max(1));
    if let Err(e) = receive(&mut upload, body, remaining, idle, &mut t).await {
        return Ok(closing(e));
    }
    run_blocking(move || upload.commit()).await?;
    jobs.note_scratch_written(&lease.id, t.bytes);
    t.complete = true;
    let answer = FileWritten {
        path: rel.as_string(),
        bytes: t.bytes,
    };
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// Writes the body into the upload's file, piece by piece; refuses when a piece takes too
/// long to arrive or the bytes pass `limit`. Dropping the upload on error deletes it.
async fn receive(
    upload: &mut Upload,
    mut body: Body,
    limit: u64,
    idle: Duration,
    t: &mut Transfer,
) -> ApiResult<()> {
    let std_file = upload
        .take_file()
        .ok_or_else(|| ApiError::internal(&std::io::Error::other("upload without a file")))?;
    let mut file =
        tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::from_std(std_file));
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(stalled(idle)),
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the upload's body could not be read to its end",
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        t.bytes += data.len() as u64;
        if t.bytes > limit {
            return Err(over_quota(&t.lease, t.bytes, limit));
        }
        file.write_all(&data).await.map_err(write_error)?;
    }
    file.flush().await.map_err(write_error)?;
    Ok(())
}

/// A full volume is the tenant's to hear about (507), unlike other write failures.
fn write_error(e: std::io::Error) -> ApiError {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "the node's scratch volume is full",
        ),
        _ => ApiError::internal(&e),
    }
}

/// A refusal of an upload whose body was not read to its end: the connection cannot carry
/// another request, so it is closed.
fn closing(e: ApiError) -> Response {
    let mut r = e.into_response();
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}

/// 408 for an upload that stopped sending.
fn stalled(idle: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!("the upload sent nothing for {} s", idle.as_secs()),
    )
}

/// `GET /v1/leases/{id}/files/{*path}`: a file's bytes, or a directory's entries.
pub(super) async fn get_file(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((id, path)): Path<(String, String)>,
) -> ApiResult<Response> {
    let lease = lease_for(&node, &p, id, "read a lease's files").await?;
    let rel = RelPath::parse(&path)?;
    serve(&node, &w, &lease, rel, client_ip(peer)).await
}

/// `GET /v1/leases/{id}/files`: the scratch's top directory.
pub(super) async fn list_root(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let lease = lease_for(&node, &p, id, "read a lease's files").await?;
    serve(&node, &w, &lease, RelPath::root(), client_ip(peer)).await
}

/// A download: decided by the policy before anything is opened, recorded when it ends.
async fn serve(
    node: &Arc<Node>,
    w: &Workloads,
    lease: &Lease,
    rel: RelPath,
    client: IpAddr,
) -> ApiResult<Response> {
    let decision = decide_download(node, lease, &rel.as_string(), client).await?;
    let jobs = w.jobs()?.clone();
    let root = scratch_root(&jobs, lease).await?;
    let target = rel.clone();
    let opened = run_blocking(move || root.open_read(&target)).await?;
    let mut t = Transfer::new(node, lease, rel.as_string(), "out", client, decision);
    match opened {
        Opened::Dir(entries) => {
            let body = serde_json::to_vec(&listing(entries)).map_err(|e| ApiError::internal(&e))?;
            (t.bytes, t.complete) = (body.len() as u64, true);
            let headers = [(header::CONTENT_TYPE, "application/json")];
            Ok((headers, body).into_response())
        }
        Opened::File(f, size) => {
            // At most the size announced: a job growing the file meanwhile cannot make the
            // body disagree with its Content-Length.
            let f = tokio::fs::File::from_std(f).take(size);
            let stream = futures_util::stream::unfold((Some(f), t), next_chunk);
            let headers = [
                (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                (header::CONTENT_LENGTH, size.to_string()),
            ];
            Ok((headers, Body::from_stream(stream)).into_response())
        }
    }
}

/// The next piece of a download; after an error, the end (the client sees a short body).
async fn next_chunk(
    (f, mut t): (Option<tokio::io::Take<tokio::fs::File>>, Transfer),
) -> Option<(
    std::io::Result<Bytes>,
    (Option<tokio::io::Take<tokio::fs::File>>, Transfer),
)> {
    let mut f = f?;
    let mut buf = vec![0u8; CHUNK];
    match f.read(&mut buf).await {
        Ok(0) => {
            t.complete = true;
            None
        }
        Ok(n) => {
            buf.truncate(n);
            t.bytes += n as u64;
            // hyper stops polling once Content-Length bytes are out: the end is seen here.
            t.complete = f.limit() == 0;
            Some((Ok(Bytes::from(buf)), (Some(f), t)))
        }
        Err(e) => Some((Err(e), (None, t))),
    }
}

fn listing(entries: Vec<(String, Kind, u64)>) -> FileList {
    let entries = entries
        .into_iter()
        .map(|(name, kind, bytes)| FileEntry {
            name,
            kind: match kind {
                Kind::File => FileKind::File,
                Kind::Dir => FileKind::Dir,
                Kind::Other => FileKind::Other,
            },
            bytes,
        })
        .collect();
    FileList { entries }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::confined::{RelPath, Root};
    use std::os::unix::fs::MetadataExt;

    fn transfer() -> Transfer {
        Transfer {
            node: None,
            tenant: "t".into(),
            lease: "l".into(),
            path: "f".into(),
            direction: "in",
            bytes: 0,
            complete: false,
            client: IpAddr::from([127, 0, 0, 1]),
            decision: TransferDecision::upload("sha256:00"),
        }
    }

    fn upload(dir: &std::path::Path) -> Upload {
        let uid = std::fs::metadata(dir).unwrap().uid();
        let root = Root::open(dir, uid).unwrap();
        root.create(&RelPath::parse("f").unwrap()).unwrap()
    }

    fn chunks(n: usize, size: usize) -> Body {
        let pieces = (0..n).map(move |_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; size])));
        Body::from_stream(futures_util::stream::iter(pieces))
    }

    /// A body that passes the limit is cut mid-stream with 507 and leaves no file.
    #[tokio::test]
    async fn an_upload_past_the_limit_is_cut_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut up = upload(dir.path());
        let mut t = transfer();
        let idle = Duration::from_secs(5);
        let e = receive(&mut up, chunks(10, 1000), 4500, idle, &mut t)
            .await
            .unwrap_err();
        assert_eq!(e.into_response().status(), StatusCode::INSUFFICIENT_STORAGE);
        drop(up);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let mut up = upload(dir.path());
        let mut t = transfer();
        receive(&mut up, chunks(4, 1000), 4000, idle, &mut t)
            .await
            .unwrap();
        assert_eq!(t.bytes, 4000);
        up.commit().unwrap();
        assert_eq!(std::fs::metadata(dir.path().join("f")).unwrap().len(), 4000);
    }

    /// A body that stops sending is cut after the idle time (408), leaving no file.
    #[tokio::test]
    async fn a_stalled_upload_is_cut_after_the_idle_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut up = upload(dir.path());
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"x"))]);
        let stalled = futures_util::StreamExt::chain(first, futures_util::stream::pending());
        let idle = Duration::from_millis(100);
        let started = std::time::Instant::now();
        let e = receive(
            &mut up,
            Body::from_stream(stalled),
            1 << 20,
            idle,
            &mut transfer(),
        )
        .await
        .unwrap_err();
        assert_eq!(e.into_response().status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(up);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
