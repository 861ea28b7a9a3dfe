//! Waiting, bounded, for what the kernel makes as its drivers probe (the root's devices, the
//! TPM, the state partition): there is no udev in the initrd to say when they are there.

use std::time::{Duration, Instant};

/// How often to look again.
const INTERVAL: Duration = Duration::from_millis(20);

/// Calls `ready` until it gives a value, every 20 ms for up to `wait` (and once more at the
/// end); `None` if it never did.
pub(crate) fn until<T>(wait: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_ends_the_wait_and_none_comes_after_the_bound() {
        let mut calls = 0;
        let got = until(Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, Some(3));
        let started = Instant::now();
        assert_eq!(until(Duration::from_millis(50), || None::<()>), None);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }
}
