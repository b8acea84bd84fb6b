//! The error type every layer below `ffi/` returns. The C boundary turns an `Error` into an
//! `rcb_status` code plus the thread's last-error message.

use std::fmt;

/// What went wrong, as the C caller needs to distinguish it. Each kind maps to exactly one
/// `rcb_status` code in `ffi/status.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    NullArgument,
    InvalidArgument,
    InvalidHandle,
    InvalidState,
    ForeignNode,
    OutOfMemory,
    RuntimeUnavailable,
    NoDevice,
    Unsupported,
    Runtime,
    Timeout,
    Config,
    CallbackFailed,
    Panic,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidState, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// Prefixes the message with what the caller was doing, keeping the kind.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The runtime calls that failed during a teardown which went on past them (so that one failed
/// destroy does not leak everything after it); each error names its call, and the object it
/// was for is leaked.
#[derive(Debug, Default)]
#[must_use = "report the leaks (into_result) or log them"]
pub struct Leaks(Vec<Error>);

impl Leaks {
    /// Notes the result of one release.
    pub fn note(&mut self, released: Result<()>) {
        if let Err(e) = released {
            self.0.push(e);
        }
    }

    pub fn push(&mut self, failure: Error) {
        self.0.push(failure);
    }

    pub fn append(&mut self, other: Leaks) {
        self.0.extend(other.0);
    }

    /// `Ok` when every release succeeded; else a `Runtime` error that says `what` is gone all the
    /// same and names every failed call.
    pub fn into_result(self, what: &str) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let calls: Vec<&str> = self.0.iter().map(|e| e.message.as_str()).collect();
        Err(Error::new(
            ErrorKind::Runtime,
            format!("{what} was released, but runtime resources were leaked ({} failed call(s)): {}", calls.len(), calls.join("; ")),
        ))
    }

    /// For a teardown that has no caller to tell (a drop): each failure is logged.
    pub fn log(self, what: &str) {
        for e in self.0 {
            log::warn!("{what}: leaked: {e}");
        }
    }
}
