//! The vocabulary of a check report, shared by `selftest` (its checks), `probe` (its steps) and
//! the check modules: where a report ran, the outcome of one check, one report line. A leaf: it
//! imports no other module of the program.

/// Where the checks ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// The isolated bench (no DSP on this machine).
    Bench,
    /// A real device.
    Device,
}

impl Platform {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Bench => "bench",
            Platform::Device => "device",
        }
    }
}

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The check ran and held.
    Pass,
    /// The check ran and did not hold.
    Fail,
    /// The check could not run here; `detail` says why.
    Skip,
}

impl Status {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }

    /// The tag of the readable report.
    pub fn tag(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Check {
    /// Short name.
    pub name: &'static str,
    /// The acceptance stage it belongs to.
    pub stage: &'static str,
    /// Outcome.
    pub status: Status,
    /// The measured figure.
    pub figure: String,
    /// Explanation.
    pub detail: String,
    /// What to do so that a skipped (or failed) check runs here: what to install and how; empty
    /// when there is nothing to do on this machine.
    pub hint: String,
}

impl Check {
    /// The check `name` of `stage` that ran: pass or fail with its figure and detail, no hint.
    pub fn of(name: &'static str, stage: &'static str, outcome: Outcome) -> Check {
        let (status, (figure, detail)) = match outcome {
            Ok(r) => (Status::Pass, r),
            Err(r) => (Status::Fail, r),
        };
        Check { name, stage, status, figure, detail, hint: String::new() }
    }
}

/// A check's result: `Ok((figure, detail))` or `Err((figure, detail))`.
pub type Outcome = Result<(String, String), (String, String)>;
