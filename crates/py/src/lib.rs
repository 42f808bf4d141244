//! `trove._native`: the Rust half of the `trove` Python package (the Python half is in
//! `python/trove/`). It owns three things:
//!
//! - the process's async runtime ([`runtime`]): one tokio runtime per process, created on first
//!   use and created again in a forked child (a DataLoader worker), detected by the pid;
//! - the client ([`remote`]): `Client` and `File` over the client library, no FUSE in the path,
//!   every call made with the GIL released;
//! - the image pipeline ([`vision`]): JPEG decode, crop, resize, flip and normalization into the
//!   caller's NumPy arrays, with the GIL released, one sample or a batch on several threads.
//!
//! Architecture invariant: nothing created in a parent process is used or dropped in a forked
//! child. A child shares the parent's sockets and epoll instance (same open file descriptions),
//! and its copy of the parent's runtime has no threads: touching either would corrupt or wake the
//! parent's connections. Objects of another pid are leaked (`std::mem::forget`), never dropped.

mod remote;
mod vision;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;

/// Worker threads of the runtime: I/O waits, it does not compute (decoding happens on the
/// caller's threads), and a DataLoader runs one runtime per worker process.
const RUNTIME_THREADS_DEFAULT: usize = 2;

struct ProcessRuntime {
    pid: u32,
    runtime: Arc<tokio::runtime::Runtime>,
}

/// The runtime of this process. Only ever locked briefly while the GIL is held, so a fork (which
/// Python performs holding the GIL) never copies it locked.
static RUNTIME: parking_lot::Mutex<Option<ProcessRuntime>> = parking_lot::Mutex::new(None);

/// This process's tokio runtime, created on first use and again after a fork.
pub(crate) fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock();
    if let Some(p) = slot.as_ref() {
        if p.pid == pid {
            return Ok(p.runtime.clone());
        }
    }
    if let Some(parent) = slot.take() {
        // A forked child: the parent's runtime has no threads here and shares its epoll
        // instance with the parent; dropping it would deregister the parent's sockets.
        std::mem::forget(parent);
    }
    let threads = std::env::var("TROVE_RUNTIME_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(RUNTIME_THREADS_DEFAULT);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("trove-io")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start Trove's I/O runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    *slot = Some(ProcessRuntime { pid, runtime: runtime.clone() });
    Ok(runtime)
}

/// A Trove error as the matching `OSError` subclass (FileNotFoundError, FileExistsError, ...:
/// Python picks the subclass from the errno), naming the path.
pub(crate) fn os_error(e: client::WireError, path: &str) -> PyErr {
    PyOSError::new_err((e.code.errno(), format!("{} ({:?})", e.message, e.code), path.to_string()))
}

pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The pid objects remember to tell a forked child from their creator.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// TFRecord's masked CRC-32C of `data` (what each record's length and data fields carry).
#[pyfunction]
fn masked_crc32c(py: Python<'_>, data: &[u8]) -> u32 {
    let crc = py.detach(|| crc32c::crc32c(data));
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<remote::Client>()?;
    m.add_class::<remote::File>()?;
    vision::register(m)?;
    m.add_function(wrap_pyfunction!(masked_crc32c, m)?)?;
    m.add("RUNTIME_THREADS_DEFAULT", RUNTIME_THREADS_DEFAULT)?;
    Ok(())
}
