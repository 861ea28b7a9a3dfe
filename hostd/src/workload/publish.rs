//! Published service ports: a TCP forwarder from a node address into a lease's namespace.
//!
//! Forwarding in userspace (rather than DNAT) keeps the metering exact, payload bytes counted
//! as they are copied, readable at any time, and needs no DNAT on loopback. The forwarder runs
//! in the host's namespace and connects to the lease-side veth address, which the lease's
//! filter lets answer as return traffic of a connection the host opened; a lease can still
//! open nothing towards the host.

use attest::report::report;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

/// Why a port could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    #[error("cannot listen on {addr} for lease {lease}")]
    Bind {
        lease: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("max_connections must be at least 1")]
    NoConnections,
}

/// What to forward where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// The node address and port clients connect to (port 0 picks one).
    pub listen: SocketAddr,
    /// The lease-side address and the job's port.
    pub target: SocketAddr,
    /// Connections forwarded at once; more are accepted and closed at once, so a client
    /// flood cannot exhaust the node's descriptors.
    pub max_connections: usize,
    /// How long connecting to the job may take before the client is dropped.
    pub connect_timeout: Duration,
}

/// Counters of one published port, updated as bytes are copied.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Payload bytes from clients to the job.
    pub to_job: AtomicU64,
    /// Payload bytes from the job to clients.
    pub from_job: AtomicU64,
    /// Connections forwarded.
    pub accepted: AtomicU64,
    /// Connections closed because `max_connections` were open.
    pub refused: AtomicU64,
}

/// A published port. Dropping it (or [`ServicePort::stop`]) closes the listener and every
/// connection it forwards.
#[derive(Debug)]
pub struct ServicePort {
    local: SocketAddr,
    counters: Arc<PortCounters>,
    task: JoinHandle<()>,
}

impl ServicePort {
    /// Starts forwarding `config.listen` to `config.target` for `lease`.
    pub async fn publish(lease: &str, config: PortConfig) -> Result<ServicePort, PublishError> {
        if config.max_connections == 0 {
            return Err(PublishError::NoConnections);
        }
        let bind_err = |source| PublishError::Bind {
            lease: lease.to_owned(),
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let counters = Arc::new(PortCounters::default());
        let task = tokio::spawn(accept_loop(
            lease.to_owned(),
            listener,
            config,
            counters.clone(),
        ));
        tracing::info!(lease, %local, "service port published");
        Ok(ServicePort {
            local,
            counters,
            task,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Its counters (shared: they keep counting until it stops).
    pub fn counters(&self) -> &Arc<PortCounters> {
        &self.counters
    }

    /// Closes the listener and all connections, and waits until they are closed.
    pub async fn stop(mut self) {
        self.task.abort();
        // Waiting for the aborted task means the listener and the connections are closed
        // when this returns (Drop then aborts it again, harmlessly).
        let _ = (&mut self.task).await;
    }
}

impl Drop for ServicePort {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts clients until aborted; the connections live in a `JoinSet` owned by this task, so
/// aborting it drops the set, which aborts (and so closes) every connection.
async fn accept_loop(
    lease: String,
    listener: TcpListener,
    config: PortConfig,
    counters: Arc<PortCounters>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (client, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(lease = %lease, error = %report(&e), "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(lease = %lease, %peer, "service port full; connection closed");
                    continue;
                };
                counters.accepted.fetch_add(1, Ordering::Relaxed);
                let (lease, counters, config) = (lease.clone(), counters.clone(), config.clone());
                conns.spawn(async move {
                    forward(&lease, client, &config, &counters).await;
                    drop(permit);
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Connects one client to the job and copies both ways until both sides are done.
async fn forward(lease: &str, client: TcpStream, config: &PortConfig, counters: &PortCounters) {
    let job = match tokio::time::timeout(config.connect_timeout, TcpStream::connect(config.target))
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(lease, target = %config.target, error = %report(&e), "job port refused");
            return;
        }
        Err(_) => {
            tracing::warn!(lease, target = %config.target, "job port did not answer");
            return;
        }
    };
    let (cr, cw) = client.into_split();
    let (jr, jw) = job.into_split();
    // An error either way ends both directions (a reset client must not leave the job's
    // side open); a clean end of one direction waits for the other.
    let both = tokio::try_join!(
        copy(cr, jw, &counters.to_job),
        copy(jr, cw, &counters.from_job)
    );
    if let Err(e) = both {
        tracing::debug!(lease, error = %report(&e), "forwarded connection ended with an error");
    }
}

/// Copies until end of stream, counting each chunk as it is written, then half-closes the
/// writer so the other side sees the end too.
async fn copy(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    count: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    fn config(target: SocketAddr, max: usize) -> PortConfig {
        PortConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            target,
            max_connections: max,
            connect_timeout: WAIT,
        }
    }

    /// A job that reads a request to its end, then answers `reply` bytes.
    async fn job(reply: usize) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut sink = Vec::new();
                    let _ = s.read_to_end(&mut sink).await;
                    let _ = s.write_all(&vec![9u8; reply]).await;
                });
            }
        });
        addr
    }

    /// Waits (at most `WAIT`) until `done` holds: what the proxy does runs on its own tasks,
    /// which a loaded machine may run late.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until nothing listens on `addr` any more.
    async fn closed(addr: SocketAddr) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while TcpStream::connect(addr).await.is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "listener left open");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Reads until end of stream; `None` if nothing ends it before `WAIT`.
    async fn read_all(s: &mut TcpStream) -> Option<usize> {
        let mut got = Vec::new();
        match tokio::time::timeout(WAIT, s.read_to_end(&mut got)).await {
            Ok(Ok(_)) => Some(got.len()),
            Ok(Err(_)) => Some(got.len()), // reset: closed, too
            Err(_) => None,
        }
    }

    #[tokio::test]
    async fn bytes_are_counted_both_ways_and_stop_closes_everything() {
        let port = ServicePort::publish("l1", config(job(40_000).await, 8))
            .await
            .unwrap();
        let mut c = TcpStream::connect(port.local_addr()).await.unwrap();
        c.write_all(&vec![1u8; 100_000]).await.unwrap();
        c.shutdown().await.unwrap();
        assert_eq!(read_all(&mut c).await, Some(40_000));
        let counters = port.counters().clone();
        assert_eq!(counters.to_job.load(Ordering::Relaxed), 100_000);
        assert_eq!(counters.from_job.load(Ordering::Relaxed), 40_000);
        assert_eq!(counters.accepted.load(Ordering::Relaxed), 1);

        // An open connection (the job waits for the end of its request) is closed by stop.
        let mut idle = TcpStream::connect(port.local_addr()).await.unwrap();
        idle.write_all(b"partial").await.unwrap();
        let addr = port.local_addr();
        until("the partial request reached the job", || {
            counters.to_job.load(Ordering::Relaxed) == 100_007
        })
        .await;
        port.stop().await;
        assert_eq!(read_all(&mut idle).await, Some(0), "connection left open");
        closed(addr).await;
        assert_eq!(counters.to_job.load(Ordering::Relaxed), 100_007);
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_closed_and_drop_stops() {
        let port = ServicePort::publish("l2", config(job(1).await, 1))
            .await
            .unwrap();
        let mut first = TcpStream::connect(port.local_addr()).await.unwrap();
        first.write_all(b"x").await.unwrap();
        let counters = port.counters().clone();
        until("the first connection was accepted", || {
            counters.to_job.load(Ordering::Relaxed) == 1
        })
        .await;
        let mut second = TcpStream::connect(port.local_addr()).await.unwrap();
        assert_eq!(read_all(&mut second).await, Some(0));
        assert_eq!(port.counters().refused.load(Ordering::Relaxed), 1);
        // The first still works.
        first.shutdown().await.unwrap();
        assert_eq!(read_all(&mut first).await, Some(1));
        let addr = port.local_addr();
        drop(port);
        closed(addr).await;
    }

    #[tokio::test]
    async fn a_job_that_does_not_listen_closes_the_client() {
        let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = unused.local_addr().unwrap();
        drop(unused);
        let port = ServicePort::publish("l3", config(target, 1)).await.unwrap();
        let mut c = TcpStream::connect(port.local_addr()).await.unwrap();
        assert_eq!(read_all(&mut c).await, Some(0));
        let zero = config(target, 0);
        assert!(matches!(
            ServicePort::publish("l3", zero).await,
            Err(PublishError::NoConnections)
        ));
    }
}
