//! The error type every layer below `ffi/` returns. The C boundary turns an [`Error`] into an
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
