//! `/v1/leases/{id}/jobs`: tenants' jobs on their leases.
//!
//! A job is reached through its lease, so the lease rules apply: a tenant sees and acts on
//! its own leases only (another tenant's lease answers 404), operators on all, auditors read
//! jobs but not their output, which is the tenant's data (as its files are). Output leaves
//! the node as a download: under the residency policy, and recorded in the ledger.

use super::leases::visible_lease;
use super::*;
use crate::workload::runner::NodeJobs;
use attest::report::report;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use hostd_api::job::{Job, JobList, NewJob};
use hostd_api::query::{JobsQuery, LogsQuery, JOBS_LIMIT_MAX};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// The jobs controller, or why this node runs no jobs.
#[derive(Clone)]
pub enum Workloads {
    /// Jobs run.
    On(Arc<NodeJobs>),
    /// Jobs are off; the sentence says why (it is shown to clients and in the banner).
    Off(String),
}

impl Workloads {
    pub(super) fn jobs(&self) -> ApiResult<&Arc<NodeJobs>> {
        match self {
            Workloads::On(j) => Ok(j),
            Workloads::Off(why) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this node runs no jobs: {why}"),
            )),
        }
    }
}

/// The lease if the principal may see it (404 otherwise) and, for writes, act on it.
async fn lease_for(node: &Arc<Node>, p: &Principal, id: String, write: bool) -> ApiResult<Lease> {
    if write && p.role == Role::Auditor {
        return Err(ApiError::forbidden(p, "run or stop jobs"));
    }
    let who = p.clone();
    blocking(node, move |n| visible_lease(n, &who, &id)).await
}

pub(super) async fn start_job(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    Path(id): Path<String>,
    body: Result<Json<NewJob>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    let lease = lease_for(&node, &p, id, true).await?;
    let Json(req) = body?;
    let job = w.jobs()?.start(&lease, req).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

pub(super) async fn list_jobs(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    Path(id): Path<String>,
    q: Result<Query<JobsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<JobList>> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let (after, limit) = jobs_page(&q)?;
    let lease = lease_for(&node, &p, id, false).await?;
    let (jobs, next_after) = w.jobs()?.page(&lease.id, after, limit)?;
    Ok(Json(JobList { jobs, next_after }))
}

/// The page a [`JobsQuery`] asks for, or 400 (see [`page_request`]).
fn jobs_page(q: &JobsQuery) -> Result<(Option<&str>, usize), ApiError> {
    page_request(q.after.as_deref(), q.limit, JOBS_LIMIT_MAX, "job")
}

pub(super) async fn get_job(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    Path((id, job)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    let lease = lease_for(&node, &p, id, false).await?;
    Ok(Json(w.jobs()?.get(&lease.id, &job)?))
}

pub(super) async fn stop_job(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    Path((id, job)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    let lease = lease_for(&node, &p, id, true).await?;
    Ok(Json(w.jobs()?.stop(&lease.id, &job).await?))
}

/// The job's output so far; with `follow=true`, the answer stays open and streams new output
/// until the job ends (then the rest, then the end of the body).
pub(super) async fn job_logs(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<Workloads>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path((id, job)): Path<(String, String)>,
    q: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    if p.role == Role::Auditor {
        return Err(ApiError::forbidden(&p, "read a job's output"));
    }
    let lease = lease_for(&node, &p, id, false).await?;
    let jobs = w.jobs()?.clone();
    jobs.get(&lease.id, &job)?;
    let path = jobs.log_path(&lease.id, &job)?;
    let what = format!("output of job {job}");
    let client = files::client_ip(peer);
    let decision = files::decide_download(&node, &lease, &what, client).await?;
    let transfer = files::Transfer::new(&node, &lease, what, "out", client, decision);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::spawn(stream_log(
        jobs, lease.id, job, path, q.follow, tx, transfer,
    ));
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

const LOG_CHUNK: usize = 64 * 1024;
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Sends the log in chunks; when following, polls for more until the job has ended and
/// everything it wrote was sent. Stops as soon as the client goes away. The transfer is
/// recorded when it ends (complete only if everything was sent).
async fn stream_log(
    jobs: Arc<NodeJobs>,
    lease: String,
    job: String,
    path: std::path::PathBuf,
    follow: bool,
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    mut transfer: files::Transfer,
) {
    let mut offset = 0u64;
    loop {
        // Read the state first: output written before the job ended is then read below.
        let ended = !follow
            || jobs
                .get(&lease, &job)
                .map(|j| j.state.is_final())
                .unwrap_or(true);
        match read_from(&path, offset, &tx, &mut transfer).await {
            Ok(n) => offset += n,
            Err(()) => return,
        }
        if ended {
            transfer.finished();
            return;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
        if tx.is_closed() {
            return;
        }
    }
}

/// Sends everything in `path` from `offset`; `Err` when the client went away.
async fn read_from(
    path: &std::path::Path,
    offset: u64,
    tx: &tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    transfer: &mut files::Transfer,
) -> Result<u64, ()> {
    let mut f = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            tracing::warn!(error = %report(&e), "cannot open a job log");
            let _ = tx.send(Err(std::io::Error::other("log unreadable"))).await;
            return Err(());
        }
    };
    if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
        return Err(());
    }
    let mut sent = 0u64;
    let mut buf = vec![0u8; LOG_CHUNK];
    loop {
        let n = match f.read(&mut buf).await {
            Ok(0) => return Ok(sent),
            Ok(n) => n,
            Err(_) => return Err(()),
        };
        if tx
            .send(Ok(Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_err()
        {
            return Err(());
        }
        sent += n as u64;
        transfer.sent(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(after: Option<&str>, limit: Option<u64>) -> JobsQuery {
        JobsQuery {
            after: after.map(str::to_owned),
            limit,
        }
    }

    /// A page is 1 to 1,000 jobs (1,000 when unsaid), after something shaped like a job id.
    #[test]
    fn a_jobs_page_is_bounded_and_after_a_job_id() {
        let q = query(None, None);
        assert_eq!(jobs_page(&q).unwrap(), (None, 1_000));
        let q = query(Some("job-0193a1b2c3d4e5f60718293a4b5c"), Some(7));
        assert_eq!(
            jobs_page(&q).unwrap(),
            (Some("job-0193a1b2c3d4e5f60718293a4b5c"), 7)
        );
        for bad in [
            query(None, Some(0)),
            query(None, Some(1_001)),
            query(Some(""), None),
            query(Some("../x"), None),
            query(Some(&"a".repeat(65)), None),
        ] {
            let err = jobs_page(&bad).unwrap_err();
            let status = err.into_response().status();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
