//! The campaign's queue of trials: the workers take trials in order, and a trial that takes the
//! host (a browser's) starts only once no other trial runs. While such a trial waits at the head
//! nothing else starts, so the workers drain once and it does not wait behind trials started
//! after it; trials that take the host one after another run back to back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Trials to run, each with whether it takes the host.
pub(crate) struct Queue<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

struct State<T> {
    todo: VecDeque<(T, bool)>,
    /// Trials running beside others.
    shared: usize,
    /// A trial that takes the host is running.
    alone: bool,
    /// Trials allowed to run beside each other at once.
    limit: usize,
    /// Which places (numbered from 0) running trials hold: each trial beside others takes the
    /// lowest free one, so that `limit` trials hold places 0 to `limit - 1`.
    places: Vec<bool>,
}

impl<T> State<T> {
    /// The lowest free place, now taken.
    fn take_place(&mut self) -> usize {
        match self.places.iter().position(|used| !used) {
            Some(i) => {
                self.places[i] = true;
                i
            }
            None => {
                self.places.push(true);
                self.places.len() - 1
            }
        }
    }

    /// Takes the head if it may start now.
    fn try_take(&mut self) -> Option<(T, bool)> {
        let &(_, alone) = self.todo.front()?;
        let free = !self.alone
            && if alone {
                self.shared == 0
            } else {
                self.shared < self.limit
            };
        if !free {
            return None;
        }
        if alone {
            self.alone = true;
        } else {
            self.shared += 1;
        }
        self.todo.pop_front()
    }
}

/// A started trial's place: dropping it tells the queue the trial ended.
pub(crate) struct Running<'a, T> {
    queue: &'a Queue<T>,
    alone: bool,
    place: Option<usize>,
}

impl<T> Running<'_, T> {
    /// The place the trial holds among those running beside each other (0 for the first);
    /// `None` for a trial that runs alone.
    pub(crate) fn place(&self) -> Option<usize> {
        self.place
    }
}

impl<T> Drop for Running<'_, T> {
    fn drop(&mut self) {
        let mut s = self.queue.lock();
        if self.alone {
            s.alone = false;
        } else {
            s.shared -= 1;
        }
        if let Some(p) = self.place {
            s.places[p] = false;
        }
        drop(s);
        self.queue.changed.notify_all();
    }
}

impl<T> Queue<T> {
    pub(crate) fn new(todo: impl IntoIterator<Item = (T, bool)>) -> Self {
        Queue {
            state: Mutex::new(State {
                todo: todo.into_iter().collect(),
                shared: 0,
                alone: false,
                limit: usize::MAX,
                places: Vec::new(),
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // a worker that panicked holding the lock left the counts as they were
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allows `limit` trials (at least one) to run beside each other from now on; running
    /// trials above it finish undisturbed.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.lock().limit = limit.max(1);
        self.changed.notify_all();
    }

    /// Keeps only the queued trials `keep` accepts (those running are not the queue's any
    /// more); how many it removed.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&(T, bool)) -> bool) -> usize {
        let mut s = self.lock();
        let before = s.todo.len();
        s.todo.retain(|x| keep(x));
        let removed = before - s.todo.len();
        drop(s);
        self.changed.notify_all();
        removed
    }

    /// Trials allowed to run beside each other now.
    pub(crate) fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Trials running now.
    pub(crate) fn running(&self) -> usize {
        let s = self.lock();
        s.shared + usize::from(s.alone)
    }

    /// The next trial, once it may start (see the module's rule); `None` once the queue is
    /// empty or `stop` is set.
    pub(crate) fn take(&self, stop: &AtomicBool) -> Option<(T, Running<'_, T>)> {
        let mut s = self.lock();
        loop {
            if stop.load(Ordering::Relaxed) || s.todo.is_empty() {
                return None;
            }
            if let Some((item, alone)) = s.try_take() {
                let place = (!alone).then(|| s.take_place());
                return Some((
                    item,
                    Running {
                        queue: self,
                        alone,
                        place,
                    },
                ));
            }
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The head, if it may start now (without waiting).
    #[cfg(test)]
    fn try_take(&self) -> Option<(T, Running<'_, T>)> {
        let mut s = self.lock();
        let (item, alone) = s.try_take()?;
        let place = (!alone).then(|| s.take_place());
        Some((
            item,
            Running {
                queue: self,
                alone,
                place,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_that_takes_the_host_starts_alone_and_holds_back_those_after_it() {
        let q = Queue::new([
            ("s1", false),
            ("s2", false),
            ("x1", true),
            ("x2", true),
            ("s3", false),
        ]);
        let (a, ra) = q.try_take().unwrap();
        let (b, rb) = q.try_take().unwrap();
        assert_eq!((a, b), ("s1", "s2"));
        // x1 waits for both, and s3 behind it does not start meanwhile
        assert!(q.try_take().is_none());
        drop(ra);
        assert!(q.try_take().is_none());
        drop(rb);
        let (x, rx) = q.try_take().unwrap();
        assert_eq!(x, "x1");
        assert_eq!(rx.place(), None, "a trial alone holds no place");
        assert!(q.try_take().is_none(), "nothing beside a trial alone");
        drop(rx);
        // the next one alone follows at once, then shared trials again
        let (x, rx) = q.try_take().unwrap();
        assert_eq!(x, "x2");
        assert!(q.try_take().is_none());
        drop(rx);
        let (s, _rs) = q.try_take().unwrap();
        assert_eq!(s, "s3");
        assert!(q.try_take().is_none(), "empty");
    }

    #[test]
    fn the_limit_holds_back_trials_beyond_it_and_a_raise_wakes_a_waiting_worker() {
        let q = Queue::new([("s1", false), ("s2", false), ("s3", false), ("s4", false)]);
        q.set_limit(1);
        let (_, r1) = q.try_take().unwrap();
        assert_eq!(q.running(), 1);
        assert_eq!(r1.place(), Some(0));
        assert!(q.try_take().is_none(), "a second trial beside the first");
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| q.take(&stop).map(|(x, _)| x));
            std::thread::sleep(Duration::from_millis(30));
            assert!(!waiter.is_finished(), "s2 started above the limit");
            q.set_limit(2);
            assert_eq!(waiter.join().unwrap(), Some("s2"));
        });
        // (s2 has ended) lowered below what runs: nothing new starts until enough have ended
        let (x, r2) = q.try_take().unwrap();
        assert_eq!(x, "s3");
        assert_eq!(
            r2.place(),
            Some(1),
            "place 1 freed by s2, place 0 held by s1"
        );
        q.set_limit(1);
        assert!(q.try_take().is_none());
        drop(r1);
        assert!(q.try_take().is_none(), "still one running, the limit");
        drop(r2);
        let (x, r4) = q.try_take().unwrap();
        assert_eq!((x, r4.place()), ("s4", Some(0)), "the lowest free place");
    }

    #[test]
    fn workers_waiting_for_the_host_wake_when_it_frees_and_stop_ends_the_wait() {
        let q = Queue::new([("s1", false), ("x1", true)]);
        let stop = AtomicBool::new(false);
        let (_, rs) = q.take(&stop).unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| q.take(&stop).map(|(x, _)| x));
            std::thread::sleep(Duration::from_millis(30));
            assert!(!waiter.is_finished(), "x1 started beside s1");
            drop(rs);
            assert_eq!(waiter.join().unwrap(), Some("x1"));
        });
        let q = Queue::new([("s1", false), ("x1", true)]);
        let (_, _rs) = q.take(&stop).unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| q.take(&stop).is_none());
            stop.store(true, Ordering::Relaxed);
            assert!(waiter.join().unwrap(), "a stopped campaign starts nothing");
        });
    }
}
