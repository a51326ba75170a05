//! When the SQLite writer wakes its checkpointer and when it has the WAL start over: a decision
//! made after every commit from the pages written and the checkpointer's pass counts, kept
//! apart from the threads so that it can be tested step by step.
//!
//! A pass every [`PAGES_BETWEEN_PASSES`] written (none asked for while a restart waits). A
//! restart that is due waits for a pass that starts after it is due (not one already under
//! way), so that what the restart copies itself, with commits held, is what was committed
//! during that one short pass. Once twice `store.wal_restart_mib` has been written, the restart
//! is sent without waiting for that pass (it still runs after a pass under way, with commits
//! held), so the WAL stays under about twice the setting.

/// WAL pages written between two passes (4 MiB). Passes four times rarer copy less in all (a
/// page that many commits rewrote is copied once), but each is a burst of work four times as
/// long beside the commits, which the first token's tail pays for (see the benchmarks' notes).
const PAGES_BETWEEN_PASSES: u64 = 1024;

/// What the writer does after a commit.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    Nothing,
    /// Ask the checkpointer for a pass.
    Pass,
    /// Restart the WAL, with commits held until it is done.
    Restart,
}

/// The checkpointer's passes so far: those it has started and those it has finished (one at a
/// time, so the pass that was the n-th to start has finished once n have).
pub(super) struct Passes {
    pub(super) started: u64,
    pub(super) finished: u64,
}

/// The writer's count of pages since the last pass it asked for and the last restart, and the
/// restart it waits for: the number of the pass it waits for, counted as they start.
pub(super) struct Pacer {
    restart_pages: u64,
    since_pass: u64,
    since_restart: u64,
    due: Option<u64>,
}

impl Pacer {
    /// A pacer that restarts the WAL every `restart_pages` written.
    pub(super) fn new(restart_pages: u64) -> Self {
        Pacer {
            restart_pages,
            since_pass: 0,
            since_restart: 0,
            due: None,
        }
    }

    /// The step after a commit that wrote `pages` pages, the checkpointer having made `passes`.
    pub(super) fn after_commit(&mut self, pages: u64, passes: Passes) -> Step {
        self.since_pass += pages;
        self.since_restart += pages;
        match self.due {
            Some(pass)
                if passes.finished >= pass
                    || self.since_restart >= self.restart_pages.saturating_mul(2) =>
            {
                self.since_pass = 0;
                self.since_restart = 0;
                self.due = None;
                Step::Restart
            }
            // Waiting for the pass: looked at again after the next commit.
            Some(_) => Step::Nothing,
            None if self.since_restart >= self.restart_pages => {
                // The next pass to start: the one asked for now, or one already asked for.
                self.due = Some(passes.started + 1);
                Step::Pass
            }
            None if self.since_pass >= PAGES_BETWEEN_PASSES => {
                self.since_pass = 0;
                Step::Pass
            }
            None => Step::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::{Nothing, Pass, Restart};

    /// Runs a pacer restarting every `restart_pages` through commits of (pages written, passes
    /// started, passes finished), checking the step after each.
    fn check(restart_pages: u64, commits: &[(u64, u64, u64, Step)]) {
        let mut pacer = Pacer::new(restart_pages);
        for (i, (pages, started, finished, step)) in commits.iter().enumerate() {
            let passes = Passes {
                started: *started,
                finished: *finished,
            };
            assert_eq!(pacer.after_commit(*pages, passes), *step, "commit {i}");
        }
    }

    #[test]
    fn a_pass_every_4_mib_written() {
        check(
            64 * 256,
            &[
                (1023, 0, 0, Nothing),
                (1, 0, 0, Pass),
                (1000, 1, 1, Nothing),
                (100, 1, 1, Pass),
            ],
        );
    }

    #[test]
    fn a_due_restart_waits_for_the_pass_asked_for_then() {
        check(
            4096,
            &[
                (1024, 0, 0, Pass),
                (1024, 1, 1, Pass),
                (1024, 2, 2, Pass),
                // The restart is due: a pass is asked for, and nothing more while it runs.
                (1024, 3, 3, Pass),
                (10, 3, 3, Nothing),
                (2000, 4, 3, Nothing),
                // It is done: the restart.
                (10, 4, 4, Restart),
                // Counting starts over.
                (1023, 4, 4, Nothing),
                (1, 4, 4, Pass),
            ],
        );
    }

    #[test]
    fn a_pass_under_way_when_the_restart_falls_due_is_not_the_one_it_waits_for() {
        check(
            4096,
            &[
                // A pass (the timer's, say) has started and not finished as the restart falls
                // due.
                (4096, 1, 0, Pass),
                // It finishes: the restart still waits for the next.
                (10, 1, 1, Nothing),
                (10, 2, 1, Nothing),
                (10, 2, 2, Restart),
            ],
        );
    }

    #[test]
    fn a_wal_twice_the_restart_size_restarts_without_waiting_for_the_pass() {
        check(
            4096,
            &[
                (3072, 0, 0, Pass),
                (1024, 0, 0, Pass),
                (4000, 1, 0, Nothing),
                (96, 1, 0, Restart),
            ],
        );
    }
}
