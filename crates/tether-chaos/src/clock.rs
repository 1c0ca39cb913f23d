//! The wall clock's steps during a run.
//!
//! The history's times come from the database server's wall clock, which
//! is this machine's. A clock that is stepped back (a time sync, a virtual
//! machine resumed from a snapshot) makes a later event read as earlier,
//! which no database bug did. The watch measures such steps — the wall
//! clock against the monotonic one, which is never stepped — so that the
//! checks that compare times can tell a stepped clock from a misordered
//! history, and say which it was.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the clocks are compared.
const EVERY: Duration = Duration::from_millis(20);

/// A drift of the wall clock against the monotonic one smaller than this
/// between two samples is the two reads' own distance, not a step.
const NOISE_US: i64 = 200;

/// Watches the wall clock until [`ClockWatch::stop`].
pub struct ClockWatch {
    stop: Arc<AtomicBool>,
    back_us: Arc<AtomicI64>,
    thread: Option<JoinHandle<()>>,
}

impl ClockWatch {
    /// Starts sampling on a thread of its own (no runtime stall delays it
    /// past the step it should see, and a stall is no step: both clocks
    /// move on through it).
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let back_us = Arc::new(AtomicI64::new(0));
        let thread = {
            let (stop, back_us) = (stop.clone(), back_us.clone());
            std::thread::spawn(move || {
                let origin = Instant::now();
                let mut last = None;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(now) = offset_us(origin) {
                        if let Some(last) = last.filter(|last| last - now > NOISE_US) {
                            back_us.fetch_add(last - now, Ordering::Relaxed);
                        }
                        last = Some(now);
                    }
                    std::thread::sleep(EVERY);
                }
            })
        };
        ClockWatch {
            stop,
            back_us,
            thread: Some(thread),
        }
    }

    /// Stops the watch: how far, in µs, the wall clock was stepped back in
    /// all (0 when it never was).
    pub fn stop(mut self) -> i64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.back_us.load(Ordering::Relaxed)
    }
}

/// The wall clock less the monotonic clock's time since `origin`, in µs:
/// constant while neither is stepped (a slewed clock drifts far below
/// [`NOISE_US`] per sample). None when the thread was held up between
/// the reads, which would make a stall look like a step.
fn offset_us(origin: Instant) -> Option<i64> {
    let before = origin.elapsed().as_micros() as i64;
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_micros() as i64;
    let after = origin.elapsed().as_micros() as i64;
    (after - before <= NOISE_US / 4).then_some(wall - before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_left_alone_is_never_stepped() {
        let watch = ClockWatch::start();
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(watch.stop(), 0);
    }
}
