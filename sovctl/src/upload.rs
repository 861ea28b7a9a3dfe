//! An upload's request body: a reader streamed in pieces, never held whole in memory.
//!
//! The body waits before its first byte until the node has said `100 Continue` (the request
//! carries `Expect: 100-continue`), or for [`CONTINUE_WAIT`] when nothing answers (a proxy
//! that ignores the header). A node that refuses the upload up front (over quota, no such
//! lease) then answers before any byte was sent: had the body already been on its way, the
//! node closing a socket with unread data would make the kernel reset the connection, and
//! the reset can destroy the refusal before we read it.

use hyper::body::{Body, Bytes, Frame, SizeHint};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

/// How long to wait for `100 Continue` before sending the body anyway (as curl does).
pub(crate) const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// Bytes read from the source per piece.
const PIECE: usize = 256 * 1024;

type Gate = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A reader of exactly `len` bytes as an HTTP body, reporting bytes sent to `progress`.
pub(crate) struct ReaderBody<R> {
    reader: R,
    left: u64,
    sent: u64,
    buf: Vec<u8>,
    gate: Option<Gate>,
    progress: Box<dyn FnMut(u64) + Send>,
    /// When the body last made progress (ms since `start`), so the sender can tell a slow
    /// upload from a stalled one.
    activity: Arc<Activity>,
}

/// When an upload last moved, shared between the body and the request's waiter.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the body last sent a piece (or since it was made).
    pub(crate) fn idle(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> ReaderBody<R> {
    /// The body; the first piece waits for `go` (notified on `100 Continue`) or
    /// [`CONTINUE_WAIT`].
    pub(crate) fn new(
        reader: R,
        len: u64,
        go: Arc<Notify>,
        progress: Box<dyn FnMut(u64) + Send>,
        activity: Arc<Activity>,
    ) -> ReaderBody<R> {
        let gate: Gate = Box::pin(async move {
            let _ = tokio::time::timeout(CONTINUE_WAIT, go.notified()).await;
        });
        ReaderBody {
            reader,
            left: len,
            sent: 0,
            buf: vec![0; PIECE],
            gate: Some(gate),
            progress,
            activity,
        }
    }
}

impl<R: AsyncRead + Unpin> Body for ReaderBody<R> {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(gate) = this.gate.as_mut() {
            ready!(gate.as_mut().poll(cx));
            this.gate = None;
        }
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let want = this
            .buf
            .len()
            .min(usize::try_from(this.left).unwrap_or(usize::MAX));
        let mut rb = ReadBuf::new(&mut this.buf[..want]);
        ready!(Pin::new(&mut this.reader).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        if n == 0 {
            let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while sent");
            return Poll::Ready(Some(Err(e)));
        }
        let piece = Bytes::copy_from_slice(rb.filled());
        this.left -= n as u64;
        this.sent += n as u64;
        this.activity.touch();
        (this.progress)(this.sent);
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
