//! The `cuda` backend (HIP-on-NVIDIA): `libcuda.so.1` with versioned symbols.

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::Runtime;

pub fn load(_cfg: &Config) -> Result<Box<dyn Runtime>> {
    Err(Error::new(ErrorKind::RuntimeUnavailable, "the cuda backend is not part of this build yet"))
}
